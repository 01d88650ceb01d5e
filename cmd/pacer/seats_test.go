package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
)

// TestSeatsCommands: a key with an in-flight band of N 2, both seats held
// by the fleet's one Limiter and a third call waiting: status, its JSON and
// watch show the seats in use, the call waiting and who holds them; set
// --in-flight stores an operator's N, which status and history show, and
// unset --in-flight removes it.
func TestSeatsCommands(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	ctx := context.Background()
	var fleet []admin.Member
	deadline := time.Now().Add(30 * time.Second)
	for len(fleet) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the Limiter never heartbeat")
		}
		time.Sleep(10 * time.Millisecond)
		fleet, _ = f.admin.Fleet(ctx)
	}
	id := fleet[0].ID
	req := reserve.Request{Key: "crawl", Policy: reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2}},
		Cost: reserve.Cost{"requests": 1}}
	for range 2 {
		r, err := l.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Done()
	}
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		r, err := l.Acquire(wctx, req)
		if err == nil {
			r.Done()
		}
		waited <- err
	}()
	defer func() {
		cancel()
		<-waited
	}()
	for {
		st, err := f.admin.Status(ctx, "crawl")
		if err == nil && st.Seats != nil && st.Seats.Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the third call never queued: %+v, %v", st.Seats, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// -heartbeat as the fleet's: its heartbeats are 50 ms apart.
	hb := []string{"-heartbeat", "50ms"}

	r := f.pacer(append(hb, "status", "crawl", "-sample", "0")...)
	if r.code != 0 {
		t.Fatalf("status: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"  in flight   2 seats in use, 1 call waiting; N: the code's (an operator may set one: pacer set KEY --in-flight N)\n",
		"  held by     rank 0, Limiter " + id + ": 2 seats\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status: no line %q in:\n%s", want, r.stdout)
		}
	}

	r = f.pacer(append(hb, "status", "crawl", "-sample", "0", "--json")...)
	var js statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || r.code != 0 {
		t.Fatalf("status --json: exit %d, %v: %s", r.code, err, r.stdout)
	}
	if len(js.Keys) != 1 || js.Keys[0].Seats == nil {
		t.Fatalf("status --json: no seats: %s", r.stdout)
	}
	want := admin.SeatStatus{Used: 2, Waiting: 1, Holders: []admin.SeatHolder{{Holder: "0", Limiter: id, Seats: 2}}}
	if got := *js.Keys[0].Seats; !seatsEqual(got, want) {
		t.Errorf("status --json: seats %+v, want %+v", got, want)
	}

	r = f.pacer(append(hb, "watch", "crawl", "-interval", "100ms", "-count", "1")...)
	if r.code != 0 || !strings.Contains(r.stdout, "  IN FLIGHT  ") || !strings.Contains(r.stdout, "  2 +1 waiting [0:2]  ") {
		t.Errorf("watch: exit %d, stderr %q; want an IN FLIGHT column with 2 +1 waiting [0:2]:\n%s", r.code, r.stderr, r.stdout)
	}

	// pacer web: status's lines.
	st := f.web(webOptions{}).status()
	if len(st.Keys) != 1 || !slices.Equal(st.Keys[0].SeatTexts, []string{
		"2 seats in use, 1 call waiting; N: the code's (an operator may set one: pacer set KEY --in-flight N)",
		"rank 0, Limiter " + id + ": 2 seats",
	}) {
		t.Errorf("web: keys %+v; want crawl's seat texts", st.Keys)
	}

	r = f.pacer("set", "crawl", "--in-flight", "8", "--reason", "the provider allows 8", "--who", "ops")
	if r.code != 0 || r.stderr != "" ||
		r.stdout != "crawl: in-flight N set by ops: none -> 8; every Limiter lets at most 8 in flight on the key's in-flight band from its next call for seats (the calls in flight keep theirs)\n" {
		t.Errorf("set --in-flight 8: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The stored N is enforced: the waiting call gets its seat at the
	// Limiter's next call on the key (its renew, every heartbeat), and
	// gives it back at once.
	if err := <-waited; err != nil {
		t.Fatalf("the third call under N 8: %v", err)
	}
	waited <- nil // for the deferred receive
	r = f.pacer(append(hb, "status", "crawl", "-sample", "0")...)
	if want := "  in flight   2 seats in use, 0 calls waiting; N 8 stored by an operator (see history), in place of the code's\n"; !strings.Contains(r.stdout, want) {
		t.Errorf("status after set: no line %q in:\n%s", want, r.stdout)
	}
	r = f.pacer("history", "crawl")
	if !regexp.MustCompile(`ops +in-flight N: none -> 8 +the provider allows 8\n`).MatchString(r.stdout) {
		t.Errorf("history: %q", r.stdout)
	}
	r = f.pacer("unset", "crawl", "--in-flight", "--reason", "back to the code's", "--who", "ops")
	if r.code != 0 || r.stdout != "crawl: in-flight N removed by ops: 8 -> none; the fleet goes back to the N in its code from its next call for seats\n" {
		t.Errorf("unset --in-flight: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if n, err := f.srv.Client.Exists(ctx, f.prefix+"{crawl}:seatn").Result(); err != nil || n != 0 {
		t.Errorf("the stored N is still there: %d, %v", n, err)
	}

	// On a key nobody takes seats on: stored, with a note.
	r = f.pacer("set", "nobody", "--in-flight", "3", "--reason", "typo?")
	if r.code != 0 || !strings.Contains(r.stderr, `pacer: note: no call holds or waits for seats on key "nobody"`) {
		t.Errorf("set --in-flight on an unknown key: exit %d, stderr %q", r.code, r.stderr)
	}
}

func seatsEqual(a, b admin.SeatStatus) bool {
	if a.Used != b.Used || a.Waiting != b.Waiting || a.Stored != b.Stored || len(a.Holders) != len(b.Holders) {
		return false
	}
	for i := range a.Holders {
		if a.Holders[i] != b.Holders[i] {
			return false
		}
	}
	return true
}
