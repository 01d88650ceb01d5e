package reserve

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
)

// TestAdjustScriptIdempotent runs adjust.lua twice for one reservation, as
// a client that resends a script after a read timeout would: the second run
// must change nothing. (Reservation.Cancel's own state cannot help there:
// the resend happens inside one call.)
func TestAdjustScriptIdempotent(t *testing.T) {
	s := redistest.New(t)
	clk := fakeclock.New(time.Date(2026, 11, 22, 1, 2, 3, 456789123, time.UTC))
	l, err := New(s.Client, Options{Clock: clk, ClientTime: true, KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := Limit{Rate: 10, Burst: 5}
	var rs []*Reservation
	for range 8 {
		r, err := l.Reserve(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	adjustOnce := func(r *Reservation, op string, actual ...float64) Snapshot {
		t.Helper()
		args := l.args(r.key, clk.Now(), r.spec, 0)
		args = append(args, op, strconv.FormatInt(r.slotNS/1000, 10), strconv.FormatInt(r.slotNS%1000, 10), strconv.FormatInt(r.seq, 10), "1")
		for _, a := range actual {
			args = append(args, formatFloat(a))
		}
		keys := l.keys("k", ":done")
		if _, err := l.run(ctx, op, "k", func(ctx context.Context) (any, error) {
			return adjustScript.Run(ctx, l.rdb, keys, args...).Result()
		}, nil); err != nil {
			t.Fatal(err)
		}
		st, err := l.Peek(ctx, Single("k", lim, 1))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The last one, then the one before it: both restore a permit once.
	for _, r := range []*Reservation{rs[7], rs[6]} {
		first := adjustOnce(r, "cancel")
		if again := adjustOnce(r, "cancel"); again.Bands[0].Value != first.Bands[0].Value {
			t.Fatalf("cancel of reservation %d run twice: balance %v, then %v", r.seq, first.Bands[0].Value, again.Bands[0].Value)
		}
	}
	// A settle at a larger cost, twice: charged once.
	first := adjustOnce(rs[5], "settle", 3)
	if again := adjustOnce(rs[5], "settle", 3); again.Bands[0].Value != first.Bands[0].Value {
		t.Fatalf("settle run twice: balance %v, then %v", first.Bands[0].Value, again.Bands[0].Value)
	}
	st, err := l.Peek(ctx, Single("k", lim, 1))
	if err != nil {
		t.Fatal(err)
	}
	if st.Bands[0].Value != -3 {
		t.Errorf("balance = %v, want -3 (8 reserved from 5, 2 canceled, one settled at 3)", st.Bands[0].Value)
	}
}
