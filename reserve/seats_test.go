package reserve_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// seatsPolicy is an in-flight band of n, alone.
func seatsPolicy(n int) reserve.Policy {
	return reserve.Policy{{Name: "open", Unit: "requests", InFlight: n}}
}

// outageLimiter is a Limiter on c that switches to local pacing at the
// first call that fails (100 ms heartbeats and call timeout) and probes
// Redis every probe; it is closed when t ends.
func outageLimiter(t *testing.T, c redis.UniversalClient, probe time.Duration) *reserve.Limiter {
	t.Helper()
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond,
		ProbeInterval: probe, CallTimeout: 100 * time.Millisecond, FailAfter: 1, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	return l
}

func seatsReq(key string, n int) reserve.Request {
	return reserve.Request{Key: key, Policy: seatsPolicy(n), Cost: reserve.Cost{"requests": 1}}
}

// seatHeld is an outageLimiter (probe) on a server of its own, and a call
// of its that holds one of key's n seats.
func seatHeld(t *testing.T, probe time.Duration, key string, n int) (*redistest.Server, *reserve.Limiter, *reserve.Reservation) {
	t.Helper()
	s := redistest.NewProcess(t)
	l := outageLimiter(t, s.Client, probe)
	held, err := l.Acquire(context.Background(), seatsReq(key, n))
	require.NoError(t, err)
	return s, l, held
}

// openCount counts calls open at once and keeps the most.
type openCount struct {
	open, most atomic.Int64
}

func (o *openCount) enter() {
	n := o.open.Add(1)
	for {
		m := o.most.Load()
		if n <= m || o.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (o *openCount) leave() { o.open.Add(-1) }

// TestSeatsNeverOverN: three Limiters, 24 callers, 300 calls of 0-3 ms on
// an in-flight band of 3: never more than 3 calls open at once, and every
// call is made.
func TestSeatsNeverOverN(t *testing.T) {
	s := redistest.New(t)
	seatsNeverOverN(t, func() redis.UniversalClient { return s.Client }, 3, 24, 12, 3, "seats:n", true)
}

// seatsNeverOverN runs callers goroutines of calls Acquires each, spread
// over lims Limiters on clients rdb makes, on an in-flight band of n on
// key, each call open 0-3 ms, and checks that every call is made, never
// more than n are open at once (with bind, n at some point: else the test
// proves nothing), and no seat is left held or waiting.
func seatsNeverOverN(t *testing.T, rdb func() redis.UniversalClient, lims, callers, calls, n int, key string, bind bool) {
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, Logger: quiet}
	var ls []*reserve.Limiter
	for range lims {
		l, err := reserve.New(rdb(), opts)
		require.NoError(t, err)
		closeLimiter(t, l)
		ls = append(ls, l)
	}
	ctx := context.Background()
	var oc openCount
	var made atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			l := ls[i%lims]
			for j := range calls {
				r, err := l.Acquire(ctx, seatsReq(key, n))
				if !assert.NoError(t, err) {
					return
				}
				oc.enter()
				time.Sleep(time.Duration((i+j)%4) * time.Millisecond)
				oc.leave()
				r.Done()
				r.Done() // idempotent
				made.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(callers*calls), made.Load())
	assert.LessOrEqual(t, oc.most.Load(), int64(n), "calls open at once")
	if bind {
		assert.Equal(t, int64(n), oc.most.Load(), "the band never bound: the test proves nothing")
	}
	st, err := reserve.ReadSeats(ctx, ls[0], key)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used, "seats still counted after every call ended")
	assert.Equal(t, 0, st.Waiting)
}

// TestSeatsInOrder: callers queued one after the other get their seats in
// that order, across two Limiters, by hand-off (no second call each).
func TestSeatsInOrder(t *testing.T) {
	s := redistest.New(t)
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	restore := reserve.SetSeatPoll(time.Hour)
	defer restore()
	ctx := context.Background()
	first, err := a.Acquire(ctx, seatsReq("seats:order", 1))
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got []int
		wg  sync.WaitGroup
	)
	for i := range 6 {
		l := []*reserve.Limiter{a, b}[i%2]
		wg.Go(func() {
			r, err := l.Acquire(ctx, seatsReq("seats:order", 1))
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, "open", r.Band(), "a call that waited for seats names the in-flight band as binding")
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			r.Done()
		})
		// The next caller queues only after this one has.
		require.Eventually(t, func() bool {
			st, err := reserve.ReadSeats(ctx, a, "seats:order")
			return err == nil && st.Waiting == i+1
		}, 30*time.Second, time.Millisecond)
	}
	first.Done()
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, got)
}

// TestSeatsKilledHolder: the seats of a process killed without Close come
// back to the fleet's waiters once the fleet finds it gone; those of a
// process cut off from Redis (alive, connected) stay held.
func TestSeatsKilledHolder(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, SilentHold: 10 * time.Minute, Logger: quiet}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	c, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.FleetSize() == 3 }, 30*time.Second, 5*time.Millisecond)

	// c holds the one seat of "cut", then is cut off: a waits, and does not
	// get it while c is held.
	_, err = c.Acquire(ctx, seatsReq("seats:cut", 1))
	require.NoError(t, err)
	end := c.Cut()
	defer end()
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = a.Acquire(wctx, seatsReq("seats:cut", 1))
	cancel()
	require.Error(t, err, "a took the seat of a member that is cut off but alive")
	st, err := reserve.ReadSeats(ctx, a, "seats:cut")
	require.NoError(t, err)
	assert.Equal(t, 1, st.Used)
	assert.Equal(t, 0, st.Waiting, "a's ticket left the queue when it gave up")

	// b holds the two seats of "kill" and is killed.
	for range 2 {
		_, err = b.Acquire(ctx, seatsReq("seats:kill", 2))
		require.NoError(t, err)
	}
	killed := time.Now()
	b.Kill()
	r, err := a.Acquire(ctx, seatsReq("seats:kill", 2))
	require.NoError(t, err)
	t.Logf("a killed holder's seats came back after %v (heartbeat interval 100 ms)", time.Since(killed).Round(time.Millisecond))
	r.Done()
}

// TestSeatsWithRate: an in-flight band beside a bucket: both hold.
func TestSeatsWithRate(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	p := reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 2},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 200, Burst: 1}},
	}
	var oc openCount
	var wg sync.WaitGroup
	var slots sync.Map
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				r, err := l.Acquire(ctx, reserve.Request{Key: "seats:rate", Policy: p, Cost: reserve.Cost{"requests": 1}})
				if !assert.NoError(t, err) {
					return
				}
				ns, ok := reserve.ServerSlot(r)
				assert.True(t, ok)
				_, dup := slots.LoadOrStore(ns, i)
				assert.False(t, dup, "two calls on one slot")
				assert.Equal(t, reserve.Cost{"requests": 1}, r.Cost())
				oc.enter()
				time.Sleep(time.Millisecond)
				oc.leave()
				require.NoError(t, r.Settle(ctx, reserve.Cost{"requests": 1}))
				r.Done()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, oc.most.Load(), int64(2))
	var sorted []int64
	slots.Range(func(k, _ any) bool { sorted = append(sorted, k.(int64)); return true })
	require.Len(t, sorted, 40)
	// Slots 5 ms apart at least (rate 200/s, burst 1), on the server's clock.
	for i := range sorted {
		for j := range sorted {
			if i != j {
				d := sorted[i] - sorted[j]
				assert.False(t, d > 0 && d < int64(5*time.Millisecond)-1, "slots %d ns apart", d)
			}
		}
	}
	st, err := reserve.ReadSeats(ctx, l, "seats:rate")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used)
}

// TestSeatsBadInput: every bad input is refused with a clear error and
// takes nothing.
func TestSeatsBadInput(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	req := func(p reserve.Policy, c reserve.Cost) reserve.Request {
		return reserve.Request{Key: "seats:bad", Policy: p, Cost: c}
	}
	one := reserve.Cost{"requests": 1}
	for name, tc := range map[string]struct {
		req  reserve.Request
		want error
	}{
		"negative":     {req(seatsPolicy(-1), one), reserve.ErrInvalidPolicy},
		"too many":     {req(seatsPolicy(2_000_000), one), reserve.ErrInvalidPolicy},
		"with a limit": {req(reserve.Policy{{Name: "open", InFlight: 2, Limit: reserve.Limit{Rate: 1, Burst: 1}}}, reserve.Cost{"open": 1}), reserve.ErrInvalidPolicy},
		"two":          {req(reserve.Policy{{Name: "a", Unit: "requests", InFlight: 2}, {Name: "b", Unit: "requests", InFlight: 3}}, one), reserve.ErrInvalidPolicy},
		"fraction":     {req(seatsPolicy(2), reserve.Cost{"requests": 0.5}), reserve.ErrInvalidCost},
		"NaN":          {req(seatsPolicy(2), reserve.Cost{"requests": math.NaN()}), reserve.ErrInvalidCost},
		"above N":      {req(seatsPolicy(2), reserve.Cost{"requests": 3}), reserve.ErrExceedsBurst},
		"no amount":    {req(seatsPolicy(2), reserve.Cost{"tokens": 1}), reserve.ErrInvalidCost},
		"nothing":      {req(seatsPolicy(2), reserve.Cost{"requests": 0}), reserve.ErrInvalidCost},
		"empty key":    {reserve.Request{Policy: seatsPolicy(2), Cost: one}, reserve.ErrEmptyKey},
		"bad name":     {req(reserve.Policy{{Name: "a b", InFlight: 2}}, reserve.Cost{"a b": 1}), reserve.ErrInvalidPolicy},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := l.ReserveN(ctx, tc.req)
			require.ErrorIs(t, err, tc.want)
			_, err = l.Acquire(ctx, tc.req)
			require.ErrorIs(t, err, tc.want)
		})
	}
	// Methods that cannot give seats back refuse the policy.
	err = l.WaitN(ctx, req(seatsPolicy(2), one))
	require.ErrorIs(t, err, reserve.ErrInvalidPolicy)
	assert.Contains(t, err.Error(), "Acquire")
	_, err = l.AllowN(ctx, req(seatsPolicy(2), one))
	require.ErrorIs(t, err, reserve.ErrInvalidPolicy)
	// A cancelled context takes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(cctx, req(seatsPolicy(2), one))
	require.ErrorIs(t, err, context.Canceled)
	st, err := reserve.ReadSeats(ctx, l, "seats:bad")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used)
	assert.Equal(t, 0, st.Waiting)
}

// TestSeatsTryAndCancel: TryReserveN with no wait refuses when no seat is
// free, naming the band; Cancel and Settle give the seats back.
func TestSeatsTryAndCancel(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	r1, err := l.TryReserveN(ctx, seatsReq("seats:try", 1), 0)
	require.NoError(t, err)
	_, err = l.TryReserveN(ctx, seatsReq("seats:try", 1), 0)
	var tl *reserve.WaitTooLongError
	require.True(t, errors.As(err, &tl), "%v", err)
	assert.Equal(t, "open", tl.Band)
	// The wait is until a call ends, not known: the message says so (it
	// said "wait 0s (set by band open) exceeds maximum 0s").
	assert.EqualError(t, err, "reserve: no seat of in-flight band open came free within the maximum wait 0s (a seat frees when a call ends)")
	_, err = l.TryReserveN(ctx, seatsReq("seats:try", 1), 20*time.Millisecond)
	require.True(t, errors.As(err, &tl), "%v", err)
	assert.EqualError(t, err, "reserve: no seat of in-flight band open came free within the maximum wait 20ms (a seat frees when a call ends)")
	require.NoError(t, r1.Cancel(ctx))
	r2, err := l.TryReserveN(ctx, seatsReq("seats:try", 1), 0)
	require.NoError(t, err)
	require.NoError(t, r2.Settle(ctx, nil))
	r3, err := l.TryReserveN(ctx, seatsReq("seats:try", 1), 0)
	require.NoError(t, err)
	r3.Done()
	st, err := reserve.ReadSeats(ctx, l, "seats:try")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used)
	assert.Equal(t, 0, st.Waiting)
}

// TestSeatsThroughOutage: Redis stops while calls hold seats and others
// wait: the Limiter paces locally on its share of N (the whole, alone),
// never over it, and when Redis is back its count is exact again.
func TestSeatsThroughOutage(t *testing.T) {
	ctx := context.Background()
	s, l, held := seatHeld(t, 100*time.Millisecond, "seats:out", 3)
	s.Stop(t)
	var oc openCount
	oc.enter() // held's call
	var wg sync.WaitGroup
	var made atomic.Int64
	for range 6 {
		wg.Go(func() {
			for range 5 {
				r, err := l.Acquire(ctx, seatsReq("seats:out", 3))
				if !assert.NoError(t, err) {
					return
				}
				oc.enter()
				time.Sleep(2 * time.Millisecond)
				oc.leave()
				r.Done()
				made.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(30), made.Load())
	assert.LessOrEqual(t, oc.most.Load(), int64(3), "calls open at once during the outage")
	require.True(t, l.Degraded())
	// Another call takes a seat locally and holds it through the return.
	also, err := l.Acquire(ctx, seatsReq("seats:out", 3))
	require.NoError(t, err)
	held.Done() // given back on the store
	s.Restart(t)
	require.Eventually(t, func() bool { return !l.Degraded() }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		st, err := reserve.ReadSeats(ctx, l, "seats:out")
		return err == nil && st.Used == 1
	}, 30*time.Second, 10*time.Millisecond, "Redis's count after the handback")
	also.Done()
	st, err := reserve.ReadSeats(ctx, l, "seats:out")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used)
}

// TestSeatsWithRateThroughOutage: while pacing locally, a call of a policy
// with an in-flight band and a rate band takes its seat on the store, then
// its slot; the slot's first local grant on the key, which seeds the
// store's state of the key, leaves its seats alone. Before, that seeding
// deleted every store key under the key's name, the seats' too: the seats
// held were forgotten, and a process took its share of N again beside
// them (combination runner, seed 21: 5 calls open on N = 4, a process
// holding 4 on a share of 2).
func TestSeatsWithRateThroughOutage(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	l := outageLimiter(t, s.Client, 100*time.Millisecond)
	req := reserve.Request{Key: "seats:rate-out", Cost: reserve.Cost{"requests": 1}, Policy: reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 2},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 10}},
	}}
	held, err := l.Acquire(ctx, req) // on Redis: the store is seeded with it
	require.NoError(t, err)
	s.Stop(t)
	var got *reserve.Reservation
	require.Eventually(t, func() bool {
		r, err := l.TryReserveN(ctx, req, 0)
		if err == nil {
			got = r
		}
		return l.Degraded() && got != nil
	}, 30*time.Second, 10*time.Millisecond, "no seat locally")
	require.True(t, got.Local(), "the second seat on the store")
	// N is 2: both held. A third call finds none free, on the store.
	_, err = l.TryReserveN(ctx, req, 0)
	assert.Error(t, err, "a third seat on a band of 2")
	var tooLong *reserve.WaitTooLongError
	assert.ErrorAs(t, err, &tooLong)
	got.Done()
	held.Done()
}

// TestSeatsRestartedEmpty: a Redis restarted empty has lost the seats its
// holders still hold; a Limiter that saw the key's seats before takes
// none until the holders have renewed them (at their next heartbeat), so
// the fleet stays within N.
func TestSeatsRestartedEmpty(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond,
		ProbeInterval: 100 * time.Millisecond, Logger: quiet}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(s.NewClient(t), opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	// b has seen the key's seats.
	r, err := b.Acquire(ctx, seatsReq("seats:restart", 2))
	require.NoError(t, err)
	r.Done()
	var held []*reserve.Reservation
	for range 2 {
		r, err := a.Acquire(ctx, seatsReq("seats:restart", 2))
		require.NoError(t, err)
		held = append(held, r)
	}
	s.Restart(t)
	got := make(chan error, 1)
	go func() {
		r, err := b.Acquire(ctx, seatsReq("seats:restart", 2))
		if err == nil {
			st, _ := reserve.ReadSeats(ctx, b, "seats:restart")
			t.Logf("b got a seat: source %v, seats then %+v", r.Source(), st)
			r.Done()
		}
		got <- err
	}()
	// Several heartbeats (and the young server's window) pass: b still
	// waits, a's two seats are back on Redis.
	select {
	case err := <-got:
		t.Fatalf("b took a seat while a held both (err %v)", err)
	case <-time.After(1500 * time.Millisecond):
	}
	st, err := reserve.ReadSeats(ctx, a, "seats:restart")
	require.NoError(t, err)
	assert.Equal(t, 2, st.Used, "a's seats renewed on the restarted Redis")
	for _, r := range held {
		r.Done()
	}
	require.NoError(t, <-got)
}

// TestSeatsOutageExcess: a member pacing locally takes seats at its share
// of N less what the other holders held beyond theirs when Redis last
// answered it, and a member over its share takes none. b notices the
// outage late, as a loaded machine does (lateHook): its figure is judged
// at Redis's last answer, so it is fresh still. Before, it was judged at
// the switch to local pacing, over an interval after b's last renew
// whenever a heartbeat found the outage (0.9 to 1.1 intervals after the
// renew, plus the machine's delays), and b took no seat (CI beside a CPU
// hog).
func TestSeatsOutageExcess(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond,
		ProbeInterval: 100 * time.Millisecond, CallTimeout: 100 * time.Millisecond, FailAfter: 1, Logger: quiet}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	late := newLateHook(500 * time.Millisecond)
	cb := tunedClient(t, s) // a client pacer uses as it is: the hook sees its calls
	cb.AddHook(late)
	b, err := reserve.New(cb, opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, 5*time.Millisecond)
	// N 6 over 2 members: shares of 3. a holds 4, b 1 (both renew at
	// their heartbeats, so each knows the other's seats).
	for range 4 {
		_, err := a.Acquire(ctx, seatsReq("seats:excess", 6))
		require.NoError(t, err)
	}
	mine, err := b.Acquire(ctx, seatsReq("seats:excess", 6))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // a few heartbeats: renewals
	// b's next renew is the last call Redis answers it in time; Redis
	// stops right after, and b notices late.
	late.arm()
	select {
	case <-late.renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("b never renewed its seats")
	}
	s.Stop(t)
	// b: its share 3, less a's excess 1: one seat more locally, not two.
	var got []*reserve.Reservation
	var last error
	require.Eventually(t, func() bool {
		r, err := b.TryReserveN(ctx, seatsReq("seats:excess", 6), 0)
		if err == nil {
			got = append(got, r)
		}
		last = err
		return b.Degraded() && len(got) >= 1
	}, 30*time.Second, 10*time.Millisecond, "b's last error: %v", last)
	_, err = b.TryReserveN(ctx, seatsReq("seats:excess", 6), 0)
	require.Error(t, err, "b took a third seat locally: a's 4 and b's 3 would be 7 of 6")
	// a, over its share, takes none locally.
	require.Eventually(t, func() bool {
		_, err := a.TryReserveN(ctx, seatsReq("seats:excess", 6), 0)
		return a.Degraded() && err != nil
	}, 30*time.Second, 10*time.Millisecond)
	for _, r := range got {
		r.Done()
	}
	mine.Done()
}

// TestSeatsOutageStaleExcess: a member whose figure of the others' excess
// is over an interval older than Redis's last answer to it takes no seat
// locally: what the others took meanwhile is in no figure it has, and its
// callers wait for Redis instead. b's renews are refused (redistest.Refuser)
// while its heartbeats and other calls are answered, so that its view of
// the fleet stays fresh and only the figure ages.
func TestSeatsOutageStaleExcess(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	const interval = 100 * time.Millisecond
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: interval,
		ProbeInterval: interval, CallTimeout: interval, FailAfter: 1, Logger: quiet}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, refuse := refusingLimiter(t, s, opts)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, 5*time.Millisecond)
	// As in TestSeatsOutageExcess: with a fresh figure, b would take one
	// seat locally.
	for range 4 {
		_, err := a.Acquire(ctx, seatsReq("seats:stale", 6))
		require.NoError(t, err)
	}
	mine, err := b.Acquire(ctx, seatsReq("seats:stale", 6))
	require.NoError(t, err)
	defer mine.Done()
	refuse.On.Store(true)
	heard := time.Now() // b's figure is at most this old
	for time.Since(heard) < 3*interval || refuse.Refused.Load() < 2 {
		_, err := b.Reserve(ctx, "seats:stale-other", reserve.Limit{Rate: 1000, Burst: 1000})
		require.NoError(t, err)
		time.Sleep(interval / 10)
	}
	s.Stop(t)
	require.Eventually(t, b.Degraded, 30*time.Second, 5*time.Millisecond)
	// The figure stays what it was for the whole outage: no seat, now or
	// once the fleet would count b as held (silent 3.2 intervals).
	for i := range 30 {
		r, err := b.TryReserveN(ctx, seatsReq("seats:stale", 6), 0)
		if err == nil {
			r.Done()
			t.Fatalf("try %d: b took a seat locally on a figure over an interval old", i)
		}
		time.Sleep(interval / 2)
	}
	require.True(t, b.Degraded(), "b left its outage: the tries were not all local")
}

// refusingLimiter is a Limiter on s (opts) whose seats renews a
// redistest.Refuser answers once it is on, without sending them: Redis
// answers, and the renews' figures are not heard. Closed when t ends.
func refusingLimiter(t *testing.T, s *redistest.Server, opts reserve.Options) (*reserve.Limiter, *redistest.Refuser) {
	t.Helper()
	refuse := &redistest.Refuser{Op: "renew"}
	c := tunedClient(t, s)
	c.AddHook(refuse)
	l, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	return l, refuse
}

// lateHook makes a Limiter notice an outage late, as a loaded machine
// does: once armed, the reply to its next seats renew is the last one it
// gets in time, and every command after it waits delay (or until its
// context ends) before it reaches the wire.
type lateHook struct {
	passHook
	armed, late atomic.Bool
	renewed     chan struct{} // closed at that renew's reply
	delay       time.Duration
}

func newLateHook(delay time.Duration) *lateHook {
	return &lateHook{renewed: make(chan struct{}), delay: delay}
}

func (h *lateHook) arm() { h.armed.Store(true) }

func (h *lateHook) wait(ctx context.Context) error {
	if !h.late.Load() {
		return nil
	}
	t := time.NewTimer(h.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		err := next(ctx, cmd)
		if err == nil && isRenew(cmd) && h.armed.CompareAndSwap(true, false) {
			h.late.Store(true)
			close(h.renewed)
		}
		return err
	}
}

func (h *lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// isRenew reports whether cmd runs the seats script's renew.
func isRenew(cmd redis.Cmder) bool { return redistest.ScriptOp(cmd, "renew") }

// renewGate is a go-redis hook that holds the seats script's next renew,
// once armed, until the test lets it go.
type renewGate struct {
	passHook
	armed
}

func (g *renewGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRenew(cmd) {
			g.stop()
		}
		return next(ctx, cmd)
	}
}

// TestSeatsEndDuringRenew: a call that ends while its Limiter's renew is on
// its way to Redis (the renew lists its seats, the release reaches Redis
// first) leaves no seat counted and no caller queued once the renew is
// back. Before, the renew recorded the released seats again, or queued
// the cancelled waiter again, and a hand-off gave that phantom the next
// free seat, until the Limiter's next heartbeat.
func TestSeatsEndDuringRenew(t *testing.T) {
	s := redistest.New(t)
	g := &renewGate{}
	c := tunedClient(t, s) // a client pacer uses as it is: the hook sees its calls
	c.AddHook(g)
	// The renew is held in the client, by a hook, and the call that ends
	// must run meanwhile: without pipelining, which would queue it behind
	// the renew (by design: TestPipelinedCallsShareARoundTrip).
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: time.Hour, Logger: quiet, DisablePipelining: true}
	a, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	ctx := context.Background()

	// during runs end while l's renew is held, then lets the renew go.
	during := func(l *reserve.Limiter, end func()) {
		entered, release := g.arm()
		done := make(chan struct{})
		go func() {
			defer close(done)
			reserve.RenewSeats(ctx, l)
		}()
		<-entered
		end()
		release()
		<-done
	}

	t.Run("Release", func(t *testing.T) {
		r, err := a.Acquire(ctx, seatsReq("renew:release", 1))
		require.NoError(t, err)
		during(a, r.Done)
		st, err := reserve.ReadSeats(ctx, a, "renew:release")
		require.NoError(t, err)
		assert.Equal(t, 0, st.Used, "seats counted after the call ended")
		// The seat is free: another Limiter takes it at once.
		r2, err := b.TryReserveN(ctx, seatsReq("renew:release", 1), 0)
		require.NoError(t, err, "the released seat was not free")
		r2.Done()
	})

	t.Run("Cancel", func(t *testing.T) {
		r, err := a.Acquire(ctx, seatsReq("renew:cancel", 1))
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := b.Acquire(wctx, seatsReq("renew:cancel", 1))
			waited <- err
		}()
		require.Eventually(t, func() bool {
			st, err := reserve.ReadSeats(ctx, a, "renew:cancel")
			return err == nil && st.Waiting == 1
		}, 10*time.Second, time.Millisecond, "b's call never queued")
		during(b, func() {
			cancel()
			require.ErrorIs(t, <-waited, context.Canceled)
		})
		st, err := reserve.ReadSeats(ctx, a, "renew:cancel")
		require.NoError(t, err)
		assert.Equal(t, 0, st.Waiting, "a cancelled call still queued")
		r.Done()
		st, err = reserve.ReadSeats(ctx, a, "renew:cancel")
		require.NoError(t, err)
		assert.Equal(t, 0, st.Used, "the freed seat went to a cancelled call")
	})
}

// TestSeatsOnCluster: an in-flight band on a Redis Cluster, from two
// Limiters whose callers queue (the seats freed are handed to the queue's
// head, announced on the fleet's events channel): every call is made,
// never more than N open, and the seats read back empty. seats.lua once
// took the events channel as a KEY, in another hash slot than the key's:
// every call failed with CROSSSLOT (the combination runner on a Cluster).
func TestSeatsOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3)
	seatsNeverOverN(t, func() redis.UniversalClient { return c.NewClient(t) }, 2, 8, 6, 2, "seats:cluster", false)
}

// TestSeatsCloseWhileLocal: a Limiter that closes while it paces locally
// leaves Redis's count of the key's seats as its calls left it. Its call
// that held a seat on Redis ended on the store, and a call that waited in
// Redis's queue gave up there; Close hands the key back (the renew a
// probe's handback makes), so neither is left in Redis. Before, both were,
// until another member's call on the key found the Limiter gone, and
// never when no member was left (combination runner on a Cluster, seed
// 34: the processes closed at the run's end while pacing locally after a
// master restarted empty, and 7 tickets stayed in Redis).
func TestSeatsCloseWhileLocal(t *testing.T) {
	ctx := context.Background()
	s, l, held := seatHeld(t, time.Hour, "seats:close", 1)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		r, err := l.Acquire(wctx, seatsReq("seats:close", 1))
		if err == nil {
			r.Done()
		}
		waited <- err
	}()
	require.Eventually(t, func() bool {
		st, err := reserve.ReadSeats(ctx, l, "seats:close")
		return err == nil && st.Waiting == 1
	}, 30*time.Second, 5*time.Millisecond, "the second call waits in Redis's queue")

	// l paces locally with Redis answering, as after an outage until its
	// next probe, which does not come within the test (ProbeInterval). A
	// freeze of the server made the test flaky: when the switch's tell to
	// the fleet ran into the freeze, l probed as soon as Redis answered
	// again, and on a loaded machine was back on Redis before Close (CI
	// beside a CPU hog, 2026-12-01; a freeze of 3 s and 3 s more before
	// held.Done failed it every time).
	l.Degrade(errors.New("test: Redis lost"))
	held.Done()
	cancel()
	<-waited
	require.True(t, l.Degraded())
	before, err := reserve.ReadSeats(ctx, l, "seats:close")
	require.NoError(t, err)
	t.Logf("Redis's seats before Close: %+v", before)
	require.NoError(t, l.Close())
	st, err := reserve.ReadSeatsOn(ctx, s.Client, l, "seats:close")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Used, "seats left held in Redis by a Limiter that closed")
	assert.Equal(t, 0, st.Waiting, "tickets left waiting in Redis by a Limiter that closed")
}

// TestSeatsEndedWhileLocal: a call that held a seat on Redis and ended
// while its Limiter paced locally, the key's last, is dropped from
// Redis's count at the handback. Before, the handback renewed only the
// keys with tickets left, and the seat stayed counted until the
// Limiter's next call on the key.
func TestSeatsEndedWhileLocal(t *testing.T) {
	ctx := context.Background()
	s, l, held := seatHeld(t, 100*time.Millisecond, "seats:ended", 2)
	s.Freeze(t)
	require.Eventually(t, l.Degraded, 30*time.Second, 5*time.Millisecond)
	held.Done()
	s.Thaw(t)
	require.Eventually(t, func() bool { return !l.Degraded() }, 30*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		st, err := reserve.ReadSeats(ctx, l, "seats:ended")
		return err == nil && st.Used == 0
	}, 10*time.Second, 10*time.Millisecond, "Redis's count after the handback")
}
