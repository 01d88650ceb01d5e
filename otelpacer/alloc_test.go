package otelpacer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
)

// TestGrantAllocs: once its attribute sets are made, a grant's metrics
// allocate only what the SDK's meter does itself: one per measurement (the
// options' slice, with SDK v1.47), here four (requests, time_in_queue, and
// two units). docs/otel.md, "Cost".
func TestGrantAllocs(t *testing.T) {
	g := newRig(t, otelpacer.Options{KeyAttribute: func(key string) string {
		h, _, _ := strings.Cut(key, "/")
		return h
	}})
	grant := reserve.Grant{Key: "a.example/x", Units: []string{"requests", "tokens"}, Amounts: []float64{1, 100},
		Wait: 20 * time.Millisecond, Source: reserve.SourceRedis, Band: "tokens"}
	g.tel.Granted(grant)
	if n := testing.AllocsPerRun(1000, func() { g.tel.Granted(grant) }); n > 4 {
		t.Errorf("Granted allocates %v times, want at most 4", n)
	}
}
