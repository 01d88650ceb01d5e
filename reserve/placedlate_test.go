package reserve

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestPlacedLateMoves: a slot placed later than the clock estimate says
// Redis granted it (its reply arrived late: see MaxEarly) is late by that
// much when its sleeper wakes, and takes a fresh slot as a sleeper that
// woke that late does (Options.MaxLateness), rather than fire with the
// callers on time. Before, lateness counted only from the placed slot: at
// the busy start of pacerbench's cluster phase (300 processes), 19 callers
// of one key whose replies waited 75 ms for their processes fired 75 ms
// after their slots, together with the callers on time: 57 calls in one
// second under a limit of 55.
func TestPlacedLateMoves(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	// A minute's MaxLateness: a loaded machine's own lateness never moves
	// a sleeper here; only what the placement adds does.
	l, err := New(s.Client, Options{KeyPrefix: redistest.Prefix(t), Logger: slog.New(slog.DiscardHandler), MaxLateness: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := Limit{Rate: 10, Burst: 1}
	for _, c := range []struct {
		placed time.Duration
		moves  bool
	}{{0, false}, {59 * time.Second, false}, {61 * time.Second, true}} {
		r, err := l.Reserve(ctx, "placed.example", lim)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		r.placedLate = max(r.placedLate, c.placed)
		seq := r.seq
		r.mu.Unlock()
		if err := r.Sleep(ctx); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		moved, after := r.lateMoves > 0, r.seq
		r.mu.Unlock()
		if moved != c.moves || (after != seq) != c.moves {
			t.Errorf("placed %v late (MaxLateness 1 min): moved %v (seq %d -> %d), want %v", c.placed, moved, seq, after, c.moves)
		}
	}
}
