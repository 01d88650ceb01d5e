package combo

import (
	"context"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// injector breaks the run's redis-server and mends it. Its faults never
// overlap (Generate places them one after the other).
type injector struct {
	srv     *redisproc.Server
	proxies []*slowProxy  // each fleet slot's way to srv in a seed that draws a slow Redis; else none
	rdb     *redis.Client // CONFIG SET and CLIENT PAUSE, MaxRetries -1
}

func newInjector(srv *redisproc.Server, proxies []*slowProxy) *injector {
	return &injector{srv: srv, proxies: proxies, rdb: redis.NewClient(&redis.Options{
		Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
	})}
}

func (in *injector) close() { _ = in.rdb.Close() }

// inject starts fault e.
func (in *injector) inject(e Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch k, d := e.Kind, e.For; k {
	case FaultRestart:
		in.srv.Stop()
		return nil
	case FaultFreeze:
		return in.srv.Freeze()
	case FaultOOM:
		// Every write is refused: a script that writes fails with OOM.
		if err := in.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			return err
		}
		return in.rdb.ConfigSet(ctx, "maxmemory", "1").Err()
	case FaultCPause:
		// CLIENT PAUSE <ms> ALL: every client's commands wait, ours too;
		// it ends by itself after d.
		return in.rdb.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err()
	case FaultSlow:
		return in.eachSlow(e, func(p *slowProxy) error { return p.slow(e.Latency, e.Commands) })
	}
	return fmt.Errorf("inject: %q is not a Redis fault", e.Kind)
}

// eachSlow runs do on the proxies slow Redis e slows: every slot's, or
// One's.
func (in *injector) eachSlow(e Event, do func(*slowProxy) error) error {
	ps := in.proxies
	switch {
	case len(ps) == 0:
		return fmt.Errorf("%s: a slow Redis without its proxies", e.Kind)
	case e.One && (e.Child < 0 || e.Child >= len(ps)):
		return fmt.Errorf("%s: a slow link of slot %d, of %d", e.Kind, e.Child, len(ps))
	case e.One:
		ps = ps[e.Child : e.Child+1]
	}
	for _, p := range ps {
		if err := do(p); err != nil {
			return err
		}
	}
	return nil
}

// heal ends fault e and returns once Redis answers again.
func (in *injector) heal(e Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch e.Kind {
	case FaultRestart:
		return in.srv.Restart() // empty: no state, no scripts, no heartbeats
	case FaultFreeze:
		return in.srv.Thaw()
	case FaultOOM:
		return in.rdb.ConfigSet(ctx, "maxmemory", "0").Err()
	case FaultCPause:
		// It has ended by itself; wait until commands are served again.
		for {
			err := in.rdb.Ping(ctx).Err()
			if err == nil || ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	case FaultSlow:
		return in.eachSlow(e, (*slowProxy).clear)
	}
	return fmt.Errorf("heal: %q is not a Redis fault", e.Kind)
}
