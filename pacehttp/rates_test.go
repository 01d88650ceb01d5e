package pacehttp

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestRatesBounded: a Transport keeps at most maxRates adaptive rates
// however many keys come and go (a crawler's hosts), and the latest key's
// rate is kept (issue 21, finding 18, which bounded the same map in
// reserve before the rate moved to package adaptive).
func TestRatesBounded(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tr, err := New(l, Options{Adaptive: &adaptive.Config{Start: 10, Min: 1, Max: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var last *adaptive.Rate
	for i := range 3 * maxRates {
		if last, err = tr.rate(fmt.Sprint("host-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.rates.m); n > maxRates {
		t.Fatalf("%d rates kept, want at most %d", n, maxRates)
	}
	again, err := tr.rate(fmt.Sprint("host-", 3*maxRates-1))
	if err != nil {
		t.Fatal(err)
	}
	if again != last {
		t.Fatal("the latest key's rate was forgotten")
	}
	if _, err := tr.rate(""); err == nil {
		t.Fatal("an adaptive rate for the empty key")
	}
}
