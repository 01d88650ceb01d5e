package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// memory is one row of the memory table.
type memory struct {
	Variant string
	Keys    int   // keys created, one take each
	Stored  int64 // of which in Redis right after (DBSIZE difference)
	Limit   limit
	// SampleBytes is MEMORY USAGE of the last key created.
	SampleBytes int64
	// PerKeyBytes is used_memory's growth over the creation, per key.
	PerKeyBytes float64
	// PTTL is the last key's PTTL right after it was created, and
	// DesignTTL what DESIGN.md says it should be, for pacer (else 0).
	PTTL, DesignTTL time.Duration
	// Expiry is measured for pacer only: Left keys were still in Redis
	// GoneAfter the last was created (Left 0: all expired by then).
	ExpiryChecked bool
	Left          int64
	GoneAfter     time.Duration
}

// runMemory creates c.MemKeys keys with one take each and measures what they
// cost Redis; for pacer it then waits until they have expired.
func (b *bench) runMemory(ctx context.Context, v variant) (memory, error) {
	c := b.cfg
	lim := limit{Rate: c.MemRate, Burst: 1}
	l, _, err := b.open(ctx, v, lim, 1)
	if err != nil {
		return memory{}, err
	}
	defer l.close()
	// Warm up: load the scripts, so their cache is not counted.
	if _, err := l.take(ctx, "mem:warm"); err != nil {
		return memory{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	mem0, err := usedMemory(ctx, b.admin)
	if err != nil {
		return memory{}, err
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, 32)
	)
	for i := range errs {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= int64(c.MemKeys) {
					return
				}
				if _, err := l.take(ctx, "mem:"+strconv.FormatInt(k, 10)); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	created := time.Now()
	if err := firstErr(errs); err != nil {
		return memory{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	// One more key, written last, is the sample: its PTTL, read at once,
	// is the whole TTL.
	last := "mem:last"
	if _, err := l.take(ctx, last); err != nil {
		return memory{}, err
	}
	sample, pttl, err := b.sample(ctx, v, last)
	if err != nil {
		return memory{}, err
	}
	mem1, err := usedMemory(ctx, b.admin)
	if err != nil {
		return memory{}, err
	}
	stored, err := b.count(ctx)
	if err != nil {
		return memory{}, err
	}
	r := memory{
		Variant:     v.Name,
		Keys:        c.MemKeys,
		Stored:      stored,
		Limit:       lim,
		SampleBytes: sample,
		PerKeyBytes: float64(mem1-mem0) / float64(c.MemKeys+1),
		PTTL:        pttl,
	}
	if v.Kind != kindPacer {
		return r, nil
	}
	// DESIGN.md: the key expires once the bucket would be full again, plus
	// a margin (lua/core.lua: 2 s on a write that sets the expiry); after
	// one permit, full again after 1/rate.
	r.DesignTTL = time.Duration(math.Ceil(1000/lim.Rate))*time.Millisecond + 2*time.Second
	r.ExpiryChecked = true
	if err := l.close(); err != nil {
		return memory{}, err
	}
	deadline := created.Add(r.DesignTTL + 10*time.Second)
	for {
		// The keys' states only: the fleet's policies hash (admin.Client's
		// report of the code's limits) lives as long as the fleet's heartbeats.
		left, err := b.count(ctx)
		if err != nil {
			return memory{}, err
		}
		r.Left, r.GoneAfter = left, time.Since(created)
		if left == 0 || time.Now().After(deadline) {
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count returns how many of the keys named "mem:<number>" are in Redis, in
// whatever form the limiter stores them.
func (b *bench) count(ctx context.Context) (int64, error) {
	var n int64
	iter := b.admin.Scan(ctx, 0, "*mem:[0-9]*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n, iter.Err()
}

// sample returns MEMORY USAGE and PTTL of key as v stores it.
func (b *bench) sample(ctx context.Context, v variant, key string) (int64, time.Duration, error) {
	var rk string
	switch {
	case v.Kind == kindPacer:
		rk = "pacer:{" + key + "}" // reserve.DefaultKeyPrefix
	case v.Kind == kindGCRA:
		rk = "rate:" + key
	default:
		ks, err := b.admin.Keys(ctx, "fw:"+key+":*").Result()
		if err != nil || len(ks) != 1 {
			return 0, 0, fmt.Errorf("%s: the window key of %q: %v %v", v.Name, key, ks, err)
		}
		rk = ks[0]
	}
	n, err := b.admin.MemoryUsage(ctx, rk).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: MEMORY USAGE %s: %w", v.Name, rk, err)
	}
	pttl, err := b.admin.PTTL(ctx, rk).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: PTTL %s: %w", v.Name, rk, err)
	}
	return n, pttl, nil
}
