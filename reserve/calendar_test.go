package reserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Calendar windows: the tables each call carries (computed from the tz
// database, checked here against the calendar itself), bad input, the
// policy's signature, and 24 simulated months on a real redis-server and
// on the local fallback's store, side by side.

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// ordinalOf is the test's own count of the calendar period holding t: a
// day's number since 1970-01-01, an ISO week's since Monday 1970-01-05, a
// month's (year - 1970) * 12 + month - 1, of t's local date in loc.
func ordinalOf(p reserve.Period, loc *time.Location, t time.Time) int64 {
	y, m, d := t.In(loc).Date()
	days := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	switch p {
	case reserve.Week:
		x := days - 4
		if x < 0 {
			return (x - 6) / 7
		}
		return x / 7
	case reserve.Month:
		return int64(y-1970)*12 + int64(m) - 1
	}
	return days
}

// parseTable reads a table "<spec>=<i0>:<b0>:<len>*<count>,..." back into
// its first ordinal and its boundaries.
func parseTable(t testing.TB, text string) (string, int64, []time.Time) {
	t.Helper()
	spec, rest, ok := strings.Cut(text, "=")
	require.True(t, ok, text)
	f := strings.SplitN(rest, ":", 3)
	require.Len(t, f, 3, text)
	i0, err := strconv.ParseInt(f[0], 10, 64)
	require.NoError(t, err)
	b0, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	at := time.UnixMicro(b0)
	out := []time.Time{at}
	for _, seg := range strings.Split(f[2], ",") {
		l, k, ok := strings.Cut(seg, "*")
		require.True(t, ok, seg)
		lv, err1 := strconv.ParseInt(l, 10, 64)
		kv, err2 := strconv.Atoi(k)
		require.NoError(t, errors.Join(err1, err2))
		for range kv {
			at = at.Add(time.Duration(lv) * time.Microsecond)
			out = append(out, at)
		}
	}
	return spec, i0, out
}

// Every boundary a table gives is the first instant of its period in the
// zone (the instant a µs before lies in the period before), numbered by
// the period's ordinal, and the table reaches from two periods before the
// caller's now to well after it. Zones with DST at 02:00 (Los Angeles,
// Sydney, London), by 30 minutes (Lord Howe), at midnight (Santiago: a day
// starts at 01:00), a 5:45 offset (Kathmandu), and UTC.
func TestCalendarTable(t *testing.T) {
	zones := []string{"UTC", "America/Los_Angeles", "Australia/Lord_Howe", "Australia/Sydney", "America/Santiago", "America/Havana", "Asia/Kathmandu", "Europe/London"}
	rng := rand.New(rand.NewPCG(42, 7))
	lengths := map[string]map[time.Duration]bool{}
	var golden []calendarCase
	for _, z := range zones {
		loc := mustZone(t, z)
		for _, p := range []reserve.Period{reserve.Day, reserve.Week, reserve.Month} {
			for i := range 30 {
				now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*25*24*time.Hour + time.Duration(rng.Int64N(int64(24*time.Hour))))
				text, err := reserve.CalendarTable(reserve.Window{N: 1, Calendar: p, Location: loc}, now)
				require.NoError(t, err)
				if i%6 == 0 {
					golden = append(golden, calendarCase{Period: p.String(), Zone: z, NowUS: now.UnixMicro(), Table: text})
				}
				spec, i0, bs := parseTable(t, text)
				require.Equal(t, p.String()+":"+z, spec)
				require.Equal(t, ordinalOf(p, loc, now)-2, i0, "%s %v: the table starts two periods before now", spec, now)
				require.True(t, bs[len(bs)-1].After(now.AddDate(0, 11, 0)), "%s: the table ends %v, before a year after %v", spec, bs[len(bs)-1], now)
				for j, b := range bs {
					want := i0 + int64(j)
					require.Equal(t, want, ordinalOf(p, loc, b), "%s: boundary %d %v", spec, j, b.In(loc))
					require.Equal(t, want-1, ordinalOf(p, loc, b.Add(-time.Microsecond)), "%s: a µs before boundary %d %v", spec, j, b.In(loc))
					if j > 0 && p == reserve.Day {
						if lengths[z] == nil {
							lengths[z] = map[time.Duration]bool{}
						}
						l := b.Sub(bs[j-1])
						lengths[z][l] = true
						if l != 24*time.Hour {
							// A day of a change: every instant of it has its date.
							for x := bs[j-1]; x.Before(b); x = x.Add(5 * time.Minute) {
								require.Equal(t, want-1, ordinalOf(p, loc, x), "%s: %v in day %d [%v, %v)", spec, x.In(loc), want-1, bs[j-1].In(loc), b.In(loc))
							}
						}
					}
				}
			}
		}
	}
	checkGolden(t, "testdata/calendar_tables.json", golden)
	for z, want := range map[string][]time.Duration{
		"America/Los_Angeles": {23 * time.Hour, 24 * time.Hour, 25 * time.Hour},
		"Australia/Lord_Howe": {23*time.Hour + 30*time.Minute, 24 * time.Hour, 24*time.Hour + 30*time.Minute},
		"America/Santiago":    {23 * time.Hour, 24 * time.Hour, 25 * time.Hour},
		"UTC":                 {24 * time.Hour},
	} {
		got := slices.Sorted(func(yield func(time.Duration) bool) {
			for d := range lengths[z] {
				if !yield(d) {
					return
				}
			}
		})
		require.Equal(t, want, got, "the day lengths of %s", z)
	}
}

// Bad calendar windows are refused with an error matching
// ErrInvalidWindow, and a call with one changes nothing.
func TestCalendarBadInput(t *testing.T) {
	la := mustZone(t, "America/Los_Angeles")
	for name, w := range map[string]reserve.Window{
		"period 0 with a zone": {N: 10, Length: time.Hour, Location: la},
		"period 4":             {N: 10, Calendar: reserve.Period(4)},
		"period -1":            {N: 10, Calendar: reserve.Period(-1)},
		"with a length":        {N: 10, Calendar: reserve.Day, Length: 24 * time.Hour},
		"with an origin":       {N: 10, Calendar: reserve.Day, Origin: time.Unix(3600, 0)},
		"time.Local":           {N: 10, Calendar: reserve.Day, Location: time.Local},
		"a zone named oddly":   {N: 10, Calendar: reserve.Day, Location: time.FixedZone("my zone", 3600)},
		"N 0":                  {N: 0, Calendar: reserve.Day},
	} {
		t.Run(name, func(t *testing.T) {
			pol := reserve.Policy{{Name: "daily", Unit: "requests", Window: w}}
			err := pol.Validate()
			require.ErrorIs(t, err, reserve.ErrInvalidWindow)
			t.Log(err)
			b := redisBackend(t)
			l := newLimiter(t, b, fakeclock.New(epoch))
			_, err = l.ReserveN(context.Background(), reserve.Request{Key: "k", Policy: pol, Cost: reserve.Cost{"requests": 1}})
			require.ErrorIs(t, err, reserve.ErrInvalidWindow)
			n, err := b.client.Exists(context.Background(), l.RedisKey("k"), l.RedisKey("k")+":limit").Result()
			require.NoError(t, err)
			require.Zero(t, n, "a refused call wrote a key")
		})
	}
	_, err := reserve.ParsePeriod("fortnight")
	require.ErrorIs(t, err, reserve.ErrInvalidWindow)
	p, err := reserve.ParsePeriod("week")
	require.NoError(t, err)
	require.Equal(t, reserve.Week, p)
}

// The policy's signature and its stored text stay the same whenever it is
// called, while the tables each call carries move with now; the text form
// comes back as the same policy.
func TestCalendarSignature(t *testing.T) {
	la := mustZone(t, "America/Los_Angeles")
	pol := reserve.Policy{
		{Name: "rpm", Unit: "requests", Limit: reserve.Limit{Rate: 10, Burst: 10}},
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1500, Calendar: reserve.Day, Location: la}},
		{Name: "monthly", Unit: "requests", Window: reserve.Window{N: 30000, Calendar: reserve.Month}},
	}
	sig, err := reserve.PolicySig(pol)
	require.NoError(t, err)
	require.Equal(t, "rpm requests b 10 10;daily requests c 1500 day:America/Los_Angeles;monthly requests c 30000 month:UTC;", sig)
	l := newLimiter(t, redisBackend(t), fakeclock.New(epoch))
	a1, err := reserve.CallArgs(l, "k", pol, epoch)
	require.NoError(t, err)
	a2, err := reserve.CallArgs(l, "k", pol, epoch.Add(50*24*time.Hour))
	require.NoError(t, err)
	sig2, err := reserve.PolicySig(pol)
	require.NoError(t, err)
	require.Equal(t, sig, sig2)
	// The tables are in the environment (ARGV[2]), the policy after it.
	require.NotEqual(t, a1[1], a2[1], "the tables move with now")
	require.Equal(t, a1[2:], a2[2:], "the bands' records do not")
	require.Contains(t, a1[1].(string), " cday:America/Los_Angeles=")
	text, err := pol.MarshalText()
	require.NoError(t, err)
	require.Equal(t, "3 rpm requests b 10 10 daily requests c 1500 day:America/Los_Angeles monthly requests c 30000 month:UTC", string(text))
	var back reserve.Policy
	require.NoError(t, back.UnmarshalText(text))
	sig3, err := reserve.PolicySig(back)
	require.NoError(t, err)
	require.Equal(t, sig, sig3)
	require.Equal(t, "rpm: 10/s, burst 10 (requests); daily: 1500/day America/Los_Angeles (requests); monthly: 30000/month UTC (requests)", back.String())
	require.ErrorIs(t, back.UnmarshalText([]byte("1 d requests c 5 day:Mars/Olympus")), reserve.ErrInvalidPolicy)
	require.ErrorIs(t, back.UnmarshalText([]byte("1 d requests c 5 fortnight:UTC")), reserve.ErrInvalidPolicy)
}

// calSides are a Limiter on a real redis-server and one on the local
// fallback's store, on one fake clock (client time), fed the same calls.
type calSides struct {
	clock *fakeclock.Clock
	ls    [2]*reserve.Limiter
	sc    [2]redis.Scripter
}

func newCalSides(t *testing.T, start time.Time) *calSides {
	t.Helper()
	srv := redistest.New(t)
	clk := fakeclock.New(start)
	opts := reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet}
	onRedis, err := reserve.New(srv.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, onRedis)
	frozen := time.Now()
	st := luastore.New(func() time.Time { return frozen })
	v, err := hook.OnStore(st, opts)
	require.NoError(t, err)
	onStore := v.(*reserve.Limiter)
	closeLimiter(t, onStore)
	return &calSides{clock: clk, ls: [2]*reserve.Limiter{onRedis, onStore}, sc: [2]redis.Scripter{srv.Client, st}}
}

var getScript = redis.NewScript(`return redis.call('GET', KEYS[1]) or ''`)

// state returns the key's state on both sides, which must be the same.
func (s *calSides) state(t *testing.T, key string) string {
	t.Helper()
	var out [2]string
	for i, l := range s.ls {
		v, err := getScript.Run(context.Background(), s.sc[i], []string{l.RedisKey(key)}).Text()
		require.NoError(t, err)
		out[i] = v
	}
	require.Equal(t, out[0], out[1], "the state on redis and on the store")
	return out[0]
}

// do runs op on both sides and returns the slot granted (zero: refused),
// which must be the same.
func (s *calSides) do(t *testing.T, ctx context.Context, req reserve.Request, queue bool) time.Time {
	t.Helper()
	var out [2]string
	var slot time.Time
	for i, l := range s.ls {
		var r *reserve.Reservation
		var err error
		if queue {
			r, err = l.ReserveN(ctx, req)
		} else {
			r, err = l.TryReserveN(ctx, req, 0)
		}
		var wt *reserve.WaitTooLongError
		switch {
		case errors.As(err, &wt):
			out[i] = "refused"
		case err != nil:
			t.Fatalf("%s at %v: %v", []string{"redis", "store"}[i], s.clock.Now(), err)
		default:
			slot = r.Time()
			out[i] = slot.UTC().Format(time.RFC3339Nano)
		}
	}
	require.Equal(t, out[0], out[1], "redis and the store at %v", s.clock.Now())
	return slot
}

// 24 months of calls, period by period, with continuous demand (twice the
// quota, at random instants, plus a call at each period's first µs and one
// at its last), a tenth of them queued (ReserveN: when the period is full
// they land in the next one), on Redis and on the store side by side: the
// same slots and the same states on both, no period ever holds more than
// N (counted by the test's own calendar), and every period but the last
// uses all of N. Days in Los Angeles (DST at 02:00, days of 23 and 25 h)
// and Lord Howe (DST by 30 minutes, southern hemisphere), ISO weeks in Los
// Angeles, months in Sydney.
func TestCalendarMonths(t *testing.T) {
	cases := []struct {
		zone   string
		period reserve.Period
		n      int
	}{
		// N 2 for days: 730 days of 6 calls on each side. With N 5 (12
		// calls a day) each day case took 27 s and most of the test's 56
		// CPU-s under -race, the store's Lua the most of it.
		{"America/Los_Angeles", reserve.Day, 2},
		{"Australia/Lord_Howe", reserve.Day, 2},
		{"America/Los_Angeles", reserve.Week, 10},
		{"Australia/Sydney", reserve.Month, 12},
	}
	for _, tc := range cases {
		t.Run(tc.period.String()+":"+tc.zone, func(t *testing.T) {
			t.Parallel()
			runCalendarMonths(t, mustZone(t, tc.zone), tc.period, tc.n)
		})
	}
}

func runCalendarMonths(t *testing.T, loc *time.Location, period reserve.Period, n int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(2026, uint64(period)))
	// The test's own period bounds (these zones never skip a midnight).
	bounds := func(x time.Time) (time.Time, time.Time) {
		y, m, d := x.In(loc).Date()
		switch period {
		case reserve.Week:
			d -= (int(x.In(loc).Weekday()) + 6) % 7
			return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+7, 0, 0, 0, 0, loc)
		case reserve.Month:
			return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
		}
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc).Add(time.Duration(rng.Int64N(int64(time.Hour))))
	end := start.AddDate(2, 0, 0)
	s := newCalSides(t, start)
	pol := reserve.Policy{{Name: "quota", Unit: "requests", Window: reserve.Window{N: float64(n), Calendar: period, Location: loc}}}
	req := reserve.Request{Key: "cal", Policy: pol, Cost: reserve.Cost{"requests": 1}}
	used := map[int64]int{}
	var first, last int64
	lengths := map[time.Duration]int{}
	queued, calls := 0, 0
	for at := start; at.Before(end); {
		from, to := bounds(at)
		lengths[to.Sub(from)]++
		times := []time.Time{at, to.Add(-time.Microsecond)}
		for range 2 * n {
			times = append(times, at.Add(time.Duration(rng.Int64N(int64(to.Sub(at))))))
		}
		slices.SortFunc(times, time.Time.Compare)
		for _, x := range times {
			s.clock.Set(x)
			q := rng.IntN(10) == 0
			slot := s.do(t, ctx, req, q)
			calls++
			if slot.IsZero() {
				continue
			}
			if q && slot.After(x) {
				queued++
				// A queued call lands at a period's first instant.
				f, _ := bounds(slot)
				require.True(t, slot.Equal(f), "a queued slot %v is not its period's start %v", slot.In(loc), f.In(loc))
			}
			k := ordinalOf(period, loc, slot)
			used[k]++
			require.LessOrEqual(t, used[k], n, "period %d (%v) holds more than N", k, slot.In(loc))
		}
		if first == 0 {
			first = ordinalOf(period, loc, at)
		}
		last = ordinalOf(period, loc, at)
		at = to
		if rng.IntN(50) == 0 {
			s.state(t, "cal")
		}
	}
	full := 0
	for k := first; k < last; k++ {
		require.GreaterOrEqual(t, float64(used[k]), 0.99*float64(n), "period %d used %d of %d", k, used[k], n)
		full++
	}
	st := s.state(t, "cal")
	t.Logf("%s %s: %d calls, %d queued into a later period, %d periods all used (N %d), 0 over N; period lengths %v; last state %q",
		period, loc, calls, queued, full, n, lengths, st)
	if period == reserve.Day {
		require.Len(t, lengths, 3, "the run crosses days of three lengths")
		require.Equal(t, 2, lengths[23*time.Hour]+lengths[23*time.Hour+30*time.Minute], "two springs")
		require.Equal(t, 2, lengths[25*time.Hour]+lengths[24*time.Hour+30*time.Minute], "two autumns")
	}
	require.Positive(t, queued)
}

// A reservation queued across the boundary of a 23-hour day lands at the
// next local midnight, in the next day's window (its state record carries
// the next day's ordinal), and the day after the quota is whole again.
func TestCalendarQueuedAcrossBoundary(t *testing.T) {
	ctx := context.Background()
	la := mustZone(t, "America/Los_Angeles")
	// 2026-03-08 is 23 hours long in Los Angeles.
	before := time.Date(2026, 3, 8, 23, 59, 59, 500_000_000, la)
	s := newCalSides(t, before)
	pol := reserve.Policy{{Name: "daily", Unit: "requests", Window: reserve.Window{N: 3, Calendar: reserve.Day, Location: la}}}
	req := reserve.Request{Key: "q", Policy: pol, Cost: reserve.Cost{"requests": 1}}
	midnight := time.Date(2026, 3, 9, 0, 0, 0, 0, la)
	require.Equal(t, 23*time.Hour, midnight.Sub(time.Date(2026, 3, 8, 0, 0, 0, 0, la)))
	var slots []time.Time
	for range 5 {
		slots = append(slots, s.do(t, ctx, req, true))
	}
	for i, x := range slots {
		want := before
		if i >= 3 {
			want = midnight
		}
		require.True(t, x.Equal(want), "slot %d: %v, want %v", i, x.In(la), want.In(la))
	}
	day := ordinalOf(reserve.Day, la, midnight)
	// (Format 1, the default until the fleet writes format 2, writes the
	// window's index without its "w".)
	require.Regexp(t, fmt.Sprintf(` daily w?%d 2$`, day), s.state(t, "q"))
	// At the midnight, one unit is left of the day.
	s.clock.Set(midnight)
	require.True(t, s.do(t, ctx, req, false).Equal(midnight))
	require.True(t, s.do(t, ctx, req, false).IsZero(), "a fourth call on the day")
	next := time.Date(2026, 3, 10, 0, 0, 0, 0, la)
	s.clock.Set(next.Add(-time.Microsecond))
	require.True(t, s.do(t, ctx, req, false).IsZero(), "the day's last µs")
	s.clock.Set(next)
	for range 3 {
		require.True(t, s.do(t, ctx, req, false).Equal(next))
	}
}

// A calendarCase is a table a call at NowUS sends for a calendar window:
// reserve/testdata/calendar_tables.json holds them, so that a client in
// another language computes the same tables from its own tz database
// (clients/python's tests do).
type calendarCase struct {
	Period string `json:"period"`
	Zone   string `json:"zone"`
	NowUS  int64  `json:"now_us"`
	Table  string `json:"table"`
}

var updateCalendar = flag.Bool("update-calendar", false, "rewrite reserve/testdata/calendar_tables.json")

// checkGolden compares cases with the file, or writes it with
// -update-calendar.
func checkGolden(t *testing.T, path string, cases []calendarCase) {
	t.Helper()
	want, err := json.MarshalIndent(cases, "", " ")
	require.NoError(t, err)
	want = append(want, '\n')
	if *updateCalendar {
		require.NoError(t, os.WriteFile(path, want, 0o644))
		return
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./reserve -run TestCalendarTable -update-calendar writes it")
	require.Equal(t, string(want), string(got), "%s is out of date: go test ./reserve -run TestCalendarTable -update-calendar", path)
}

// A stored limit's calendar window the caller's code does not pass: the
// script asks for the zone's table (PACER_CALENDAR, changing nothing) and
// the reservation is sent again with it, once; from then on every call on
// that key carries the table and is held to the window, while calls on
// other keys carry none (a Limit's keeps the script's fast path). A first
// peek or pause on such a key is sent again too.
func TestCalendarStoredLearned(t *testing.T) {
	ctx := context.Background()
	b := redisBackend(t)
	la := mustZone(t, "America/Los_Angeles")
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, la) // a day of 25 hours
	l := newLimiter(t, b, fakeclock.New(now))
	require.NoError(t, b.client.Set(ctx, l.RedisKey("gem")+":limit", "enforce 1 daily requests c 2 day:America/Los_Angeles", 0).Err())
	code := reserve.Policy{{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 1000}}}
	req := reserve.Request{Key: "gem", Policy: code, Cost: reserve.Cost{"requests": 1}}
	// A peek, and a pause (a provider's 429), as the first calls on keys
	// with the same stored limit: sent again with the table, once, as a
	// reservation is; neither fails.
	require.NoError(t, b.client.Set(ctx, l.RedisKey("gem2")+":limit", "enforce 1 daily requests c 2 day:America/Los_Angeles", 0).Err())
	snap, err := l.Peek(ctx, reserve.Request{Key: "gem2", Policy: code, Cost: reserve.Cost{"requests": 1}})
	require.NoError(t, err, "a first peek on a key with a stored calendar window")
	require.Zero(t, snap.Wait)
	require.NoError(t, b.client.Set(ctx, l.RedisKey("gem3")+":limit", "enforce 1 daily requests c 2 day:America/Los_Angeles", 0).Err())
	require.NoError(t, l.Pause(ctx, "gem3", 30*time.Second), "a first pause on a key with a stored calendar window")
	snap, err = l.Peek(ctx, reserve.Request{Key: "gem3", Policy: code, Cost: reserve.Cost{"requests": 1}})
	require.NoError(t, err)
	require.Equal(t, 30*time.Second+time.Millisecond, snap.Wait, "the pause reached Redis (then one spacing of rps)")
	for range 2 {
		_, err := l.TryReserveN(ctx, req, 0)
		require.NoError(t, err)
	}
	_, err = l.TryReserveN(ctx, req, 0)
	var wt *reserve.WaitTooLongError
	require.ErrorAs(t, err, &wt)
	require.Equal(t, "daily", wt.Band)
	require.Equal(t, time.Date(2026, 11, 2, 0, 0, 0, 0, la).Sub(now), wt.Wait, "the wait is to the next local midnight, 12 hours later")
	args, err := reserve.CallArgs(l, "gem", code, now)
	require.NoError(t, err)
	require.Contains(t, args[1].(string), " cday:America/Los_Angeles=")
	args, err = reserve.CallArgs(l, "other", reserve.Limit{Rate: 1, Burst: 1}.Policy(), now)
	require.NoError(t, err)
	require.NotContains(t, args[1].(string), " c", "another key's calls carry no table")
}

// A queue deeper than the calendar table a call carries (400 days ahead)
// is refused as a queue too long, and changes nothing: a slot is never
// granted in a window whose end the script does not know.
func TestCalendarQueueBeyondTable(t *testing.T) {
	ctx := context.Background()
	b := redisBackend(t)
	l := newLimiter(t, b, fakeclock.New(epoch))
	pol := reserve.Policy{{Name: "daily", Window: reserve.Window{N: 1, Calendar: reserve.Day}}}
	req := reserve.Request{Key: "deep", Policy: pol, Cost: reserve.Cost{"daily": 1}}
	granted := 0
	var last time.Time
	for {
		r, err := l.ReserveN(ctx, req)
		if err != nil {
			require.ErrorIs(t, err, reserve.ErrQueueTooLong)
			break
		}
		granted++
		last = r.Time()
		require.Less(t, granted, 1000)
	}
	// Today and the 400 days the table gives after it.
	require.Equal(t, 401, granted)
	y, m, d := epoch.Date()
	// (A slot 400 days ahead is 3.5e16 ns from now: the scripts' doubles
	// place it within a few ns of the midnight, core.lua's grid.)
	want := time.Date(y, m, d+400, 0, 0, 0, 0, time.UTC)
	require.Less(t, want.Sub(last).Abs(), time.Microsecond, "the last slot %v, want %v", last, want)
	before, err := b.client.Get(ctx, l.RedisKey("deep")).Result()
	require.NoError(t, err)
	_, err = l.ReserveN(ctx, req)
	require.ErrorIs(t, err, reserve.ErrQueueTooLong)
	after, err := b.client.Get(ctx, l.RedisKey("deep")).Result()
	require.NoError(t, err)
	require.Equal(t, before, after)
}
