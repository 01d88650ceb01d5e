package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// What each heartbeat costs Redis, call by call (issue 43): the heartbeat
// phase logs every command in SLOWLOG (slower-than 0) over its windows and
// reads back each heartbeat EVALSHA's own time (the command's execution,
// not its queueing) and its argument count, from which the reports it
// carried follow (heartbeat.lua: the keys, 12 arguments more and a pair per
// report). The
// reports run: c.Procs Limiters (each on a client of its own, as the
// processes of a fleet) start together and each calls the same c.ColdKeys
// keys once, so that every one has c.ColdKeys policies to report; the
// window lasts until they could all have been sent at 100 a heartbeat, and
// the table prints the heartbeats' Redis time per call (mean, p99, max,
// how many over 1 ms) and the reports each Limiter sent.

// heartbeatSHA is the SHA1 of this build's heartbeat.lua: its EVALSHAs in
// SLOWLOG.
var heartbeatSHA = func() string { h := sha1.Sum([]byte(lua.Heartbeat)); return hex.EncodeToString(h[:]) }()

// beatStats are the heartbeat EVALSHAs of a window, from SLOWLOG.
type beatStats struct {
	Calls       int // heartbeats and report calls (mode "report")
	ReportCalls int // of them, report calls
	Mean        time.Duration
	P50, P99    time.Duration
	Max         time.Duration
	Over1ms     int // calls that took longer than 1 ms
	// The heartbeats that carried reports, alone: their p99 and max, and
	// how many took longer than 1 ms.
	WithP99, WithMax time.Duration
	WithOver1ms      int
	Reports          map[string]int64 // reports sent, by Limiter id
	WithSome         int              // heartbeats that carried reports
	MaxCarry         int              // the most reports one heartbeat carried
	Lost             bool             // SLOWLOG was full: entries were lost
	LastSends        time.Time        // the last heartbeat that carried reports
}

// slowlogAll makes Redis log every command in SLOWLOG, up to max entries,
// from now (SLOWLOG RESET); restore puts the settings back.
func slowlogAll(ctx context.Context, admin *redis.Client, logLen int) (restore func(), err error) {
	old, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return nil, fmt.Errorf("pacerbench: CONFIG GET slowlog-*: %w", err)
	}
	for k, v := range map[string]string{"slowlog-log-slower-than": "0", "slowlog-max-len": strconv.Itoa(logLen)} {
		if err := admin.ConfigSet(ctx, k, v).Err(); err != nil {
			return nil, fmt.Errorf("pacerbench: CONFIG SET %s: %w", k, err)
		}
	}
	if err := admin.SlowLogReset(ctx).Err(); err != nil {
		return nil, fmt.Errorf("pacerbench: SLOWLOG RESET: %w", err)
	}
	return func() {
		for k, v := range old {
			admin.ConfigSet(context.Background(), k, v)
		}
		admin.SlowLogReset(context.Background())
	}, nil
}

// heartbeatCalls reads SLOWLOG's heartbeat EVALSHAs (modes redis and
// local, and report, which carries a heartbeat's reports after it: not
// leave or check). logLen is the log's length: a full log may have
// lost entries.
func heartbeatCalls(ctx context.Context, url string, logLen int) (beatStats, error) {
	// A client of its own, patient: the log of a large fleet's window is
	// long, and a loaded machine may take seconds to send it.
	o, err := redis.ParseURL(url)
	if err != nil {
		return beatStats{}, err
	}
	o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute
	rdb := redis.NewClient(o)
	defer rdb.Close()
	log, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return beatStats{}, fmt.Errorf("pacerbench: SLOWLOG GET: %w", err)
	}
	st := beatStats{Reports: map[string]int64{}, Lost: len(log) >= logLen}
	var ds, with []time.Duration
	for _, e := range log {
		a := e.Args
		if len(a) < 3 || !strings.EqualFold(a[0], "evalsha") || a[1] != heartbeatSHA {
			continue
		}
		// EVALSHA sha numkeys keys... id mode ...: the mode follows the
		// keys and the id (8 keys before format 3's P{limiters}:reads, 9 with it, 12 with
		// issue 43's indexes).
		nk, err := strconv.Atoi(a[2])
		if err != nil || len(a) < 5+nk {
			continue
		}
		id, mode := a[3+nk], a[4+nk]
		if mode != "redis" && mode != "local" && mode != "report" {
			continue
		}
		if mode == "report" {
			st.ReportCalls++
		}
		argc := len(a)
		// SLOWLOG keeps 32 arguments: the last says how many more there were.
		if len(a) == 32 {
			var more int
			if _, err := fmt.Sscanf(a[31], "... (%d more arguments)", &more); err == nil {
				argc = 31 + more
			}
		}
		// EVALSHA, sha, numkeys, the keys, then 9 arguments before the
		// reports' pairs.
		n := max(argc-(12+nk), 0) / 2
		st.Reports[id] += int64(n)
		if n > 0 {
			with = append(with, e.Duration)
			if e.Duration > time.Millisecond {
				st.WithOver1ms++
			}
			st.WithSome++
			st.MaxCarry = max(st.MaxCarry, n)
			if e.Time.After(st.LastSends) {
				st.LastSends = e.Time
			}
		}
		ds = append(ds, e.Duration)
	}
	if len(with) > 0 {
		slices.Sort(with)
		st.WithP99, st.WithMax = with[min(len(with)-1, len(with)*99/100)], with[len(with)-1]
	}
	if len(ds) == 0 {
		return st, nil
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
		if d > time.Millisecond {
			st.Over1ms++
		}
	}
	st.Calls = len(ds)
	st.Mean = sum / time.Duration(len(ds))
	st.P50 = ds[len(ds)/2]
	st.P99 = ds[min(len(ds)-1, len(ds)*99/100)]
	st.Max = ds[len(ds)-1]
	return st, nil
}

// reportsRun is the heartbeat phase's run of Limiters that each report
// the same keys' policies.
type reportsRun struct {
	Limiters, Keys int
	Window         time.Duration
	Start          time.Time
	Beats          beatStats
	Held           int64 // the policies the fleet's hash holds at the end (HLEN)
}

// reportsEvery is how many reports a window plans for per Limiter and
// second: this release's heartbeat sends 100 at most (reserve's
// reportBatch), after it, 20 to a report call (reportChunk).
const reportsEvery = 100

// reportsRun starts c.Procs Limiters on c.ColdKeys keys and measures their
// heartbeats until all could have reported every key.
func (b *bench) reportsRun(ctx context.Context) (*reportsRun, error) {
	c := b.cfg
	procs, keys := c.Procs, c.ColdKeys
	window := time.Duration(keys/reportsEvery+5) * time.Second
	if c.Quick {
		window = 3 * time.Second
	}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	u, err := redis.ParseURL(b.url)
	if err != nil {
		return nil, err
	}
	const logLen = 1_000_000
	restore, err := slowlogAll(ctx, b.admin, logLen)
	if err != nil {
		return nil, err
	}
	defer restore()
	r := &reportsRun{Limiters: procs, Keys: keys, Window: window, Start: time.Now()}
	lims := make([]*reserve.Limiter, procs)
	rdbs := make([]*redis.Client, procs)
	defer closeLimiters(lims, rdbs)
	for i := range procs {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: u.Addr, DB: u.DB})
		if lims[i], err = reserve.New(rdbs[i], reserve.Options{Logger: b.log}); err != nil {
			return nil, fmt.Errorf("reports: opening Limiter %d: %w", i, err)
		}
	}
	lim := reserve.Limit{Rate: coldLimit.Rate, Burst: coldLimit.Burst}
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		for g := range 8 {
			wg.Go(func() {
				for k := g; k < keys; k += 8 {
					if _, err := lims[i].Reserve(ctx, fmt.Sprintf("host%06d.example.com", k), lim); err != nil && errs[i] == nil && g == 0 {
						errs[i] = err
					}
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	time.Sleep(time.Until(r.Start.Add(window)))
	if r.Beats, err = heartbeatCalls(ctx, b.url, logLen); err != nil {
		return nil, err
	}
	if r.Held, err = b.admin.HLen(ctx, layout.Policies(reserve.DefaultKeyPrefix)).Result(); err != nil {
		return nil, err
	}
	return r, nil
}

// table returns the reports run's table, in Markdown.
func (r *reportsRun) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Reports at a cold start: %d Limiters start together on the same %d keys (each on a client of its own), heartbeats over %v\n\n",
		r.Limiters, r.Keys, r.Window)
	b.WriteString("Each heartbeat.lua EVALSHA's Redis time, from SLOWLOG (slower-than 0): the command's own execution. Calls are heartbeats and report calls (mode report: a heartbeat's reports, sent after it in chunks).\n\n")
	b.WriteString("| calls | report calls | with reports | most reports in one | mean µs | p50 µs | p99 µs | max µs | over 1 ms | with reports: p99 µs | max µs | over 1 ms | reports sent per Limiter | reports sent in all | policies held at the end | last report sent after |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n")
	var per []string
	var all int64
	for _, id := range slices.Sorted(maps.Keys(r.Beats.Reports)) {
		per = append(per, strconv.FormatInt(r.Beats.Reports[id], 10))
		all += r.Beats.Reports[id]
	}
	last := "-"
	if !r.Beats.LastSends.IsZero() {
		last = fmt.Sprintf("%.0f s", r.Beats.LastSends.Sub(r.Start).Seconds())
	}
	st := r.Beats
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %d | %.0f | %.0f | %d | %s | %d | %d | %s |\n", st.Calls, st.ReportCalls, st.WithSome, st.MaxCarry,
		us(st.Mean), us(st.P50), us(st.P99), us(st.Max), st.Over1ms, us(st.WithP99), us(st.WithMax), st.WithOver1ms,
		strings.Join(per, ", "), all, r.Held, last)
	if st.Lost {
		b.WriteString("\nSLOWLOG was full: some calls are missing.\n")
	}
	return b.String()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
