package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestKeyGranted: the lease and waitrate phases read how many slots the
// hot key granted from its state, which Limiters write in format 3 (binary)
// by default. Before, the text formats' third field was read from it, and
// "slots granted unused" came out as -818,208 or 5,669,304 in a 5 s run at
// 50,000/s.
func TestKeyGranted(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	// The fleet writes format 3, as pacerbench sets it (pacer format).
	if err := s.Client.Set(ctx, layout.FormatKey(prefix), "3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if _, err := l.Reserve(ctx, "hot", reserve.Limit{Rate: 1000, Burst: 10}); err != nil {
			t.Fatal(err)
		}
	}
	state, err := s.Client.Get(ctx, prefix+"{hot}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if layout.StateFormat(state) != 3 {
		t.Fatalf("the state is not format 3: %q", state)
	}
	if got := keyGranted(state); got != 3 {
		t.Fatalf("keyGranted of the state after 3 reservations = %d, want 3 (state %q)", got, state)
	}
}
