package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// The fair phase: tenants and lanes on one key (issue 23's goals), measured
// on members as the README's quick start makes them, one Limiter and one
// client each, in this process; each experiment beside first come, first
// served (the same calls without a tenant or lane) as its reference.

// fairResults are the fair phase's figures.
type fairResults struct {
	Rate    float64
	Members int
	Span    time.Duration // each measurement's length
	Steal   time.Duration

	LoneFIFO, LoneFair float64 // admissions per second, one tenant flooding

	Shares []fairShare // backlogged tenants

	NewcomerFIFO time.Duration   // a light call's wait behind the flood, first come first served
	Newcomer     []time.Duration // its waits, fair, sorted

	Urgent     []time.Duration // the urgent lane's waits beside the Batch backlog, sorted
	UrgentSlot []time.Duration // the same calls' slots, from the call, sorted: the wait the rule gave
	BatchRate  float64         // the Batch lane's admissions per second meanwhile

	DrainFIFO, DrainFair time.Duration

	Busiest1s int // the most calls returned in any 1 s, over every run

	// Across processes, through a Redis outage (fair_procs.go).
	ProcsCfg   fairProcsConfig
	Procs      []fairProcsRun
	ProcsSteal time.Duration
}

// fairShare is one backlogged tenant's part of the 10 s windows.
type fairShare struct {
	Tenant string
	Weight float64
	Got    []int   // calls per window
	Ratio  float64 // the least of got / its weighted share
}

// fairRun is one experiment's members and the calls they made.
type fairRun struct {
	members []*reserve.Limiter
	key     string
	lim     reserve.Limit

	mu    sync.Mutex
	calls map[string][]time.Time // per tenant ("" for plain calls), when Wait returned
}

func (b *bench) newFairRun(ctx context.Context, n int, name string, rate float64) (*fairRun, error) {
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	fr := &fairRun{key: name, lim: reserve.Limit{Rate: rate, Burst: 1}, calls: map[string][]time.Time{}}
	for range n {
		rdb, err := quickStartClient(b.url)
		if err != nil {
			return nil, err
		}
		l, err := reserve.New(rdb, reserve.Options{Logger: b.log})
		if err != nil {
			rdb.Close()
			fr.close()
			return nil, err
		}
		fr.members = append(fr.members, l)
	}
	return fr, nil
}

func (fr *fairRun) close() {
	for _, l := range fr.members {
		l.Close()
	}
}

// wait is one call for tenant in lane (a plain call when fair is false) on
// member m; it records when it returned and returns how long it waited.
func (fr *fairRun) wait(ctx context.Context, m int, fair bool, tenant string, lane reserve.Lane, weight float64) (time.Duration, error) {
	req := reserve.Single(fr.key, fr.lim, 1)
	if fair {
		req.Tenant, req.Lane, req.Weight = tenant, lane, weight
	}
	start := time.Now()
	err := fr.members[m%len(fr.members)].WaitN(ctx, req)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	fr.mu.Lock()
	fr.calls[tenant] = append(fr.calls[tenant], now)
	fr.mu.Unlock()
	return now.Sub(start), nil
}

// reserveSleep is one call for tenant in lane on member m by ReserveN and
// Sleep, as WaitN makes it: it records when it returned, and returns how
// long it waited and how far from the call its slot lay (the wait the fair
// rule gave, without the wake-up's lateness).
func (fr *fairRun) reserveSleep(ctx context.Context, m int, tenant string, lane reserve.Lane) (wait, slot time.Duration, err error) {
	req := reserve.Single(fr.key, fr.lim, 1)
	req.Tenant, req.Lane = tenant, lane
	start := time.Now()
	r, err := fr.members[m%len(fr.members)].ReserveN(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	slot = max(r.Time().Sub(start), 0)
	if err := r.Sleep(ctx); err != nil {
		return 0, 0, err
	}
	now := time.Now()
	fr.mu.Lock()
	fr.calls[tenant] = append(fr.calls[tenant], now)
	fr.mu.Unlock()
	return now.Sub(start), slot, nil
}

// flood runs goroutines per member calling for tenant until ctx ends.
func (fr *fairRun) flood(ctx context.Context, wg *sync.WaitGroup, perMember int, fair bool, tenant string, lane reserve.Lane, weight float64) {
	for m := range fr.members {
		for range perMember {
			wg.Go(func() {
				for ctx.Err() == nil {
					fr.wait(ctx, m, fair, tenant, lane, weight)
				}
			})
		}
	}
}

// all returns every call's time, sorted, as Unix ns.
func (fr *fairRun) all() []int64 {
	var out []int64
	for _, ts := range fr.calls {
		for _, t := range ts {
			out = append(out, t.UnixNano())
		}
	}
	slices.Sort(out)
	return out
}

// count returns tenant's calls in [from, to).
func (fr *fairRun) count(tenant string, from, to time.Time) int {
	n := 0
	for _, t := range fr.calls[tenant] {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// runFair runs the fair phase.
func (b *bench) runFair(ctx context.Context, progress func(string, ...any)) (*fairResults, error) {
	const rate = 100
	members, span := 4, 10*time.Second
	if b.cfg.Quick {
		members, span = 2, 2*time.Second
	}
	res := &fairResults{Rate: rate, Members: members, Span: span}
	cpu := readMachineCPU()
	note := func(fr *fairRun) {
		res.Busiest1s = max(res.Busiest1s, busiest(fr.all(), time.Second))
	}

	// A lone tenant, 16 goroutines per member: fair against plain.
	for _, fair := range []bool{false, true} {
		fr, err := b.newFairRun(ctx, members, "lone", rate)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, span)
		var wg sync.WaitGroup
		start := time.Now()
		fr.flood(rctx, &wg, 16, fair, "solo", reserve.Normal, 1)
		wg.Wait()
		cancel()
		fr.close()
		got := float64(fr.count("solo", start.Add(time.Second), start.Add(span))) / (span - time.Second).Seconds()
		if fair {
			res.LoneFair = got
		} else {
			res.LoneFIFO = got
		}
		note(fr)
		progress("fair        lone tenant (fair %v): %.1f/s of %d", fair, got, rate)
	}

	// Backlogged tenants of weights 1, 1 and 2, 8 goroutines each per
	// member, two windows.
	{
		fr, err := b.newFairRun(ctx, members, "shares", rate)
		if err != nil {
			return nil, err
		}
		tenants := []fairShare{{Tenant: "a", Weight: 1}, {Tenant: "b", Weight: 1}, {Tenant: "c", Weight: 2}}
		rctx, cancel := context.WithTimeout(ctx, 2*span+time.Second)
		var wg sync.WaitGroup
		start := time.Now().Add(time.Second)
		for _, tn := range tenants {
			fr.flood(rctx, &wg, 8, true, tn.Tenant, reserve.Normal, tn.Weight)
		}
		wg.Wait()
		cancel()
		fr.close()
		for _, tn := range tenants {
			tn.Ratio = 1e9
			for w := range 2 {
				from := start.Add(time.Duration(w) * span)
				n := fr.count(tn.Tenant, from, from.Add(span))
				tn.Got = append(tn.Got, n)
				tn.Ratio = min(tn.Ratio, float64(n)/(rate*span.Seconds()*tn.Weight/4))
			}
			res.Shares = append(res.Shares, tn)
			progress("fair        tenant %s (weight %g): %v calls per %v, %.2f of its share at least", tn.Tenant, tn.Weight, tn.Got, span, tn.Ratio)
		}
		note(fr)
	}

	// A flood of 1,000 calls at once, and a light tenant's single calls.
	for _, fair := range []bool{false, true} {
		fr, err := b.newFairRun(ctx, members, "newcomer", rate)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		flood := 1000
		if b.cfg.Quick {
			flood = 200
		}
		for i := range flood {
			wg.Go(func() { fr.wait(rctx, i, fair, "flood", reserve.Normal, 1) })
		}
		time.Sleep(time.Second)
		var waits []time.Duration
		lights := 16
		if b.cfg.Quick {
			lights = 3
		}
		for i := range 1 + (lights-1)*btoi(fair) {
			if i > 0 {
				time.Sleep(time.Duration(300+rand.IntN(300)) * time.Millisecond)
			}
			w, err := fr.wait(ctx, i, fair, "light", reserve.Normal, 1)
			if err != nil {
				cancel()
				fr.close()
				return nil, err
			}
			waits = append(waits, w)
		}
		cancel()
		wg.Wait()
		fr.close()
		note(fr)
		slices.Sort(waits)
		if fair {
			res.Newcomer = waits
		} else {
			res.NewcomerFIFO = waits[0]
		}
		progress("fair        a light call behind 1,000 (fair %v): waits %v", fair, waits)
	}

	// 10,000 Batch calls outstanding; urgent calls about every 100 ms.
	{
		fr, err := b.newFairRun(ctx, members, "urgent", rate)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 10000 {
			wg.Go(func() { fr.wait(rctx, i, true, "bulk", reserve.Batch, 1) })
		}
		time.Sleep(time.Second)
		start := time.Now()
		var waits, slots []time.Duration
		for i := 0; time.Since(start) < span; i++ {
			time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
			w, slot, err := fr.reserveSleep(ctx, i, "live", reserve.Urgent)
			if err != nil {
				cancel()
				fr.close()
				return nil, err
			}
			waits, slots = append(waits, w), append(slots, slot)
		}
		end := time.Now()
		cancel()
		wg.Wait()
		fr.close()
		note(fr)
		slices.Sort(waits)
		slices.Sort(slots)
		res.Urgent, res.UrgentSlot = waits, slots
		res.BatchRate = float64(fr.count("bulk", start, end)) / end.Sub(start).Seconds()
		progress("fair        urgent beside 10,000 Batch: returned p50 %v p99 %v max %v; slot p50 %v p99 %v max %v; Batch %.1f/s",
			pct(waits, 0.5), pct(waits, 0.99), waits[len(waits)-1], pct(slots, 0.5), pct(slots, 0.99), slots[len(slots)-1], res.BatchRate)
	}

	// A mixed backlog drained: fair against plain.
	for _, fair := range []bool{false, true} {
		fr, err := b.newFairRun(ctx, members, "drain", rate)
		if err != nil {
			return nil, err
		}
		scale := 1
		if b.cfg.Quick {
			scale = 10
		}
		mix := []struct {
			tenant string
			lane   reserve.Lane
			weight float64
			n      int
		}{{"a", reserve.Normal, 1, 300}, {"b", reserve.Normal, 1, 300}, {"c", reserve.Normal, 2, 300}, {"live", reserve.Urgent, 1, 50}, {"bulk", reserve.Batch, 1, 300}}
		var wg sync.WaitGroup
		start := time.Now()
		i := 0
		for _, x := range mix {
			for range x.n / scale {
				i++
				m := i
				wg.Go(func() { fr.wait(ctx, m, fair, x.tenant, x.lane, x.weight) })
			}
		}
		wg.Wait()
		took := time.Since(start)
		fr.close()
		note(fr)
		if fair {
			res.DrainFair = took
		} else {
			res.DrainFIFO = took
		}
		progress("fair        drain %d calls (fair %v): %v", i, fair, took)
	}
	res.Steal = stealSince(cpu)

	// Across processes, through an outage (fair_procs.go).
	res.ProcsCfg = fairProcsCfg(b.cfg.Quick)
	cpu = readMachineCPU()
	for _, fair := range []bool{false, true} {
		r, err := runFairProcs(ctx, res.ProcsCfg, fair)
		if err != nil {
			return nil, err
		}
		res.Procs = append(res.Procs, r)
		for _, p := range r.Phases {
			progress("fair        %d processes (fair %v), %-10s %.1f/s, light %.1f/s, %d light waits", res.ProcsCfg.Procs, fair, p.Name, p.Rate, p.LightRate, len(p.Light))
		}
	}
	res.ProcsSteal = stealSince(cpu)
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pct is the q-quantile of sorted.
func pct(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *fairResults) tables() string {
	slot := time.Duration(float64(time.Second) / r.Rate)
	t := table{
		title: "Fair share and lanes",
		intro: fmt.Sprintf("One key at %s/s, burst 1 (a slot interval of %s), %d members (Limiters) in one process, each on "+
			"`reserve.New(redis.NewClient(&redis.Options{Addr: addr}), reserve.Options{})` (the README's quick start), calling `WaitN`. "+
			"\"FIFO\" is the same calls without a tenant or lane. Calls are counted when `WaitN` returned. "+
			"Steal over the phase: %s.", thousands(r.Rate), dur(slot), r.Members, dur(r.Steal)),
		header: []string{"goal", "measured", "reference (FIFO)"},
	}
	t.rows = append(t.rows, []string{"a lone tenant gets the whole rate",
		fmt.Sprintf("%.1f/s (%.1f%%)", r.LoneFair, 100*r.LoneFair/r.Rate), fmt.Sprintf("%.1f/s", r.LoneFIFO)})
	var shares []string
	for _, s := range r.Shares {
		shares = append(shares, fmt.Sprintf("%s (w %g): %v calls, %.2f", s.Tenant, s.Weight, s.Got, s.Ratio))
	}
	t.rows = append(t.rows, []string{fmt.Sprintf("backlogged tenants: at least 0.9 of their weighted share in every %s (two)", dur(r.Span)), strings.Join(shares, "; "), "–"})
	t.rows = append(t.rows, []string{fmt.Sprintf("a light call behind 1,000: at most 2 slot intervals + a round trip (%s)", dur(2*slot)),
		fmt.Sprintf("%d calls: p50 %s, max %s", len(r.Newcomer), dur(pct(r.Newcomer, 0.5)), dur(r.Newcomer[len(r.Newcomer)-1])), dur(r.NewcomerFIFO)})
	t.rows = append(t.rows, []string{fmt.Sprintf("urgent beside 10,000 Batch: p99 at most 1 slot interval (%s); Batch takes the rest", dur(slot)),
		fmt.Sprintf("%d calls: slot p50 %s, p99 %s, max %s; returned p50 %s, p99 %s, max %s; Batch %.1f/s", len(r.Urgent),
			dur(pct(r.UrgentSlot, 0.5)), dur(pct(r.UrgentSlot, 0.99)), dur(r.UrgentSlot[len(r.UrgentSlot)-1]),
			dur(pct(r.Urgent, 0.5)), dur(pct(r.Urgent, 0.99)), dur(r.Urgent[len(r.Urgent)-1]), r.BatchRate), "–"})
	t.rows = append(t.rows, []string{"a mixed backlog drains within 1.05 x FIFO",
		fmt.Sprintf("%s (%.3f x)", dur(r.DrainFair), r.DrainFair.Seconds()/r.DrainFIFO.Seconds()), dur(r.DrainFIFO)})
	t.rows = append(t.rows, []string{"never over the limit", fmt.Sprintf("busiest 1 s of every run: %d calls (limit %s + burst 1)", r.Busiest1s, thousands(r.Rate)), "–"})
	out := t.markdown()
	if len(r.Procs) > 0 {
		c := r.ProcsCfg
		p := table{
			title: "Fair share across processes, through a Redis outage",
			intro: fmt.Sprintf("%d processes, each a Limiter on the README's quick-start client, share one key at %s/s, burst 1. "+
				"In each, one goroutine calls `WaitN` for tenant \"light\" and pauses %s after each call (it asks for about %.0f/s "+
				"in all, well under its share), and %d goroutines flood the key for tenant \"flood\". Redis (a redis-server of the run's own) "+
				"is stopped after %s and restarted empty %s later; the processes pace locally meanwhile, each at its share. "+
				"A light call's wait runs from the call to `WaitN`'s return. FIFO: the same calls without tenants. Steal: %s.",
				c.Procs, thousands(c.Rate), dur(c.Think), float64(c.Procs)/c.Think.Seconds(), c.Flooders, dur(c.Normal), dur(c.Fault), dur(r.ProcsSteal)),
			header: []string{"run", "phase", "the key's rate", "light's rate", "light's waits"},
			rows:   fairProcsRows(r.Procs),
		}
		out += "\n" + p.markdown()
	}
	return out
}
