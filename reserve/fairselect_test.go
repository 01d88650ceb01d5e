package reserve

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestFairSelectCarriesEveryLane: when a call cannot carry every queue,
// fairSelect still carries the first queue of each lane (the minimum
// share of a lower lane is granted only to a lane whose queue is in the
// call), the reach's worth of the first lane's queues by the pump's
// reckoning of the turns, and never more than the reach and fairSlack.
// It is the selection itself, exactly, for any pass and send order:
// TestFairCallsCarryEveryLane judges what it does to the slots on Redis,
// which the machine's speed moves.
//
// A selection that takes the lower lanes' queues only in their turn among
// the queues carried least recently (the carry before this rule) fails it
// when those were carried more recently than the slack's worth of urgent
// ones; a selection by creation order fails it at once.
func TestFairSelectCarriesEveryLane(t *testing.T) {
	l := &Limiter{clock: systemClockValue}
	l.opts.FairHorizon = defaultFairHorizon
	s, err := Limit{Rate: 1000, Burst: 1}.Policy().compile()
	if err != nil {
		t.Fatal(err)
	}
	// reach at 1,000/s, burst 1, a 2 ms horizon: 1 + 2 + 1 = 4 requests.
	const reach = 4
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(43, 1))
	for round := range 500 {
		var ready []fairGroup
		add := func(tenant string, lane Lane) *fairQueue {
			q := &fairQueue{
				spec:    s,
				seq:     uint64(len(ready)),
				waiting: []*request{{amounts: []float64{1}}},
				pass:    float64(rnd.IntN(20)) / 1000,
				// Carried least recently first would reach the lower
				// lanes last: the urgent queues were carried longest ago.
				sent: base.Add(time.Duration(rnd.IntN(1000)) * time.Microsecond),
			}
			if lane != Urgent {
				q.sent = q.sent.Add(time.Second)
			}
			ready = append(ready, fairGroup{ft: fairTurn{sig: s.sig, fairness: fairness{tenant: tenant, lane: lane, weight: 1}}, q: q})
			return q
		}
		urgent := 10 + rnd.IntN(40)
		for i := range urgent {
			add("u"+strconv.Itoa(i), Urgent)
		}
		lower := map[Lane][]*fairQueue{}
		for _, lane := range []Lane{Normal, Batch} {
			for i := range rnd.IntN(4) {
				lower[lane] = append(lower[lane], add(lane.String()+strconv.Itoa(i), lane))
			}
		}
		rnd.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
		// The urgent queues the pump's reckoning puts first.
		var urgentQ []*fairQueue
		for _, g := range ready {
			if g.ft.lane == Urgent {
				urgentQ = append(urgentQ, g.q)
			}
		}
		in := append([]fairGroup(nil), ready...)

		got, r := l.fairSelect(in)
		if r != reach {
			t.Fatalf("round %d: reach %d, want %d", round, r, reach)
		}
		if len(got) > reach+fairSlack {
			t.Fatalf("round %d: %d queues carried, at most %d", round, len(got), reach+fairSlack)
		}
		carried := map[*fairQueue]bool{}
		for _, g := range got {
			carried[g.q] = true
		}
		for lane, qs := range lower {
			least := qs[0].pass
			for _, q := range qs {
				least = min(least, q.pass)
			}
			first := false // a queue at the lane's least pass is carried (ties go either way)
			for _, q := range qs {
				first = first || (q.pass == least && carried[q])
			}
			if !first {
				t.Fatalf("round %d: %d urgent queues and %d of lane %v: none at the lane's least pass (%v) carried", round, urgent, len(qs), lane, least)
			}
		}
		// Every urgent queue with a pass less than the reach-th least is
		// carried (ties may go either way).
		passes := make([]float64, 0, len(urgentQ))
		for _, q := range urgentQ {
			passes = append(passes, q.pass)
		}
		cut := nthLeast(passes, reach)
		for _, q := range urgentQ {
			if q.pass < cut && !carried[q] {
				t.Fatalf("round %d: an urgent queue at pass %v, before the reach's (%v), not carried", round, q.pass, cut)
			}
		}
	}
}

// nthLeast returns the n-th least of xs (1-based).
func nthLeast(xs []float64, n int) float64 {
	s := append([]float64(nil), xs...)
	for i := range n {
		m := i
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[m] {
				m = j
			}
		}
		s[i], s[m] = s[m], s[i]
	}
	return s[n-1]
}

// BenchmarkFairSelect is a pump's choice among 50 tenants' queues on one
// key (faircost's load): what each pump call costs before its script.
func BenchmarkFairSelect(b *testing.B) {
	l := &Limiter{clock: systemClockValue}
	l.opts.FairHorizon = defaultFairHorizon
	s, err := Limit{Rate: 200, Burst: 1}.Policy().compile()
	if err != nil {
		b.Fatal(err)
	}
	base := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(43, 1))
	var ready []fairGroup
	for i := range 50 {
		q := &fairQueue{spec: s, seq: uint64(i), waiting: []*request{{amounts: []float64{1}}},
			pass: float64(rnd.IntN(20)) / 1000, sent: base.Add(time.Duration(rnd.IntN(1000)) * time.Microsecond)}
		ready = append(ready, fairGroup{ft: fairTurn{sig: s.sig, fairness: fairness{tenant: "t" + strconv.Itoa(i), weight: 1}}, q: q})
	}
	buf := make([]fairGroup, len(ready))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, ready)
		if out, _ := l.fairSelect(buf); len(out) == len(ready) {
			b.Fatal("every queue carried")
		}
	}
}
