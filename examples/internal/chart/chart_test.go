package chart

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNotBuilt: this test binary does not link package chart/svg, as an
// example's default build does not. -plot is refused with the command that
// draws, and WriteFile writes nothing.
func TestNotBuilt(t *testing.T) {
	err := Check("./examples/crawler")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "go run -tags chart ./examples/crawler -plot FILE.svg") {
		t.Errorf("Check = %v, want ErrNotBuilt naming go run -tags chart ./examples/crawler -plot FILE.svg", err)
	}
	path := filepath.Join(t.TempDir(), "calls.svg")
	now := time.Now()
	c := Chart{Rate: 10, Series: []Series{{Name: "api", Calls: []time.Time{now, now.Add(time.Second)}}}}
	if err := WriteFile(path, c); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("WriteFile = %v, want ErrNotBuilt", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile left %s (%v)", path, err)
	}
}
