package pacehttp

import (
	"context"
	"testing"
	"time"
)

// admitted reports whether a turn was given on ch (a request entered).
func admitted(ch <-chan func()) (func(), bool) {
	select {
	case rel := <-ch:
		return rel, true
	case <-time.After(20 * time.Millisecond):
		return nil, false
	}
}

// TestGateOrder: a gate lets width requests through at once and the
// others in the order they came, a retry (front) first; a request whose
// context ends leaves the queue without a turn and holds nobody back; an
// idle gate is forgotten. (The waits of 20 ms only ever decide that a turn
// was not given yet: a slow machine can make the test slow, not wrong.)
func TestGateOrder(t *testing.T) {
	var gs gates
	k := gateKey{key: "h"}
	enter := func(ctx context.Context, front bool) <-chan func() {
		ch := make(chan func(), 1)
		go func() {
			rel, err := gs.enter(ctx, k, 2, front)
			if err == nil {
				ch <- rel
			}
		}()
		return ch
	}
	waitQueued := func(n int) {
		t.Helper()
		for gs.ahead(k) != n {
			time.Sleep(time.Millisecond)
		}
	}
	a, _ := admitted(enter(context.Background(), false))
	b, _ := admitted(enter(context.Background(), false))
	if a == nil || b == nil {
		t.Fatal("a gate of width 2 did not let two requests through")
	}
	c := enter(context.Background(), false)
	waitQueued(1)
	ctx, cancel := context.WithCancel(context.Background())
	d := enter(ctx, false)
	waitQueued(2)
	e := enter(context.Background(), true) // a retry: before c and d
	waitQueued(3)
	cancel() // d leaves
	waitQueued(2)
	if _, ok := admitted(c); ok {
		t.Fatal("a third request went through a full gate")
	}
	a()
	a() // a second release of one turn gives nothing back
	re, ok := admitted(e)
	if !ok {
		t.Fatal("the retry was not let through first")
	}
	if _, ok := admitted(c); ok {
		t.Fatal("a release gave two turns")
	}
	b()
	rc, ok := admitted(c)
	if !ok {
		t.Fatal("c was not let through after the retry")
	}
	re()
	rc()
	if _, ok := admitted(d); ok {
		t.Fatal("a request whose context ended was let through")
	}
	gs.mu.Lock()
	n := len(gs.m)
	gs.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d gates kept with nothing waiting", n)
	}
}
