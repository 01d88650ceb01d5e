package reserve

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
)

// TestCancelScriptIdempotent runs cancel.lua twice for one reservation, as
// go-redis does when it resends a script after a read timeout: the second
// run must change nothing. (Reservation.Cancel's own flag cannot help there:
// the retry happens inside one call.)
func TestCancelScriptIdempotent(t *testing.T) {
	s := redistest.New(t)
	clk := fakeclock.New(time.Date(2026, 11, 22, 1, 2, 3, 456789123, time.UTC))
	l, err := New(s.Client, Options{Clock: clk, KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := Limit{Rate: 10, Burst: 5}
	var rs []*Reservation
	for range 8 {
		r, err := l.Reserve(ctx, "k", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	cancelOnce := func(r *Reservation) Status {
		t.Helper()
		_, args := l.args(r.limit, r.n, r.slotUS, r.slotFrac, r.seq)
		if _, err := l.run(ctx, "cancel", l.cancelScript, r.key, args); err != nil {
			t.Fatal(err)
		}
		st, err := l.Peek(ctx, "k", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The last one, then the one before it: both restore a permit once.
	for _, r := range []*Reservation{rs[7], rs[6]} {
		first := cancelOnce(r)
		if again := cancelOnce(r); again != first {
			t.Fatalf("cancel of reservation %d run twice: balance %v, then %v", r.seq, first.Tokens, again.Tokens)
		}
	}
	st, err := l.Peek(ctx, "k", lim, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tokens != -1 {
		t.Errorf("balance = %v, want -1 (8 reserved from 5, 2 canceled)", st.Tokens)
	}
}
