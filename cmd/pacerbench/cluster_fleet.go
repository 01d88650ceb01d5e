package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The fleet as Redis holds it, sampled once a second through the run: how
// many members the heartbeat set lists, how many of them are silent (no
// heartbeat within two intervals: the others count them as held and leave
// them their shares, core.lua's lattice), and how many say they pace
// locally. Held members shrink what the members on Redis may take of
// every key.

// fleetSample is one look at the fleet's records.
type fleetSample struct {
	At            int64 // Unix ns, this program's clock
	Members       int
	Silent, Local int
	Failed        bool // the fleet's master did not answer
}

// fleetRecords samples the fleet's records every second until stop.
type fleetRecords struct {
	mu      sync.Mutex
	samples []fleetSample
	stop    chan struct{}
	done    chan struct{}
}

func watchFleetRecords(rdb *redis.ClusterClient) *fleetRecords {
	w := &fleetRecords{stop: make(chan struct{}), done: make(chan struct{})}
	keys := layout.FleetKeys(reserve.DefaultKeyPrefix)
	go func() {
		defer close(w.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			s := fleetSample{At: time.Now().UnixNano()}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			now, err := rdb.Time(ctx).Result()
			var set []redis.Z
			var info map[string]string
			if err == nil {
				set, err = rdb.ZRangeWithScores(ctx, keys[0], 0, -1).Result()
			}
			if err == nil {
				info, err = rdb.HGetAll(ctx, keys[1]).Result()
			}
			cancel()
			if err != nil {
				s.Failed = true
				rdb.ReloadState(context.Background()) // a master may have failed over
			} else {
				s.Members = len(set)
				live := float64(now.Add(-2 * heartbeatEvery).UnixMilli())
				for _, z := range set {
					if z.Score < live {
						s.Silent++
					}
				}
				for id, v := range info {
					if !strings.HasPrefix(id, "~") && strings.HasPrefix(v, "local ") {
						s.Local++
					}
				}
			}
			w.mu.Lock()
			w.samples = append(w.samples, s)
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// end stops the sampling and returns the samples.
func (w *fleetRecords) end() []fleetSample {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}
