// Command batch is pacer's asynq demo: a batch pipeline. A producer enqueues
// a peak of tasks at once through scheduler.Enqueuer, which gives each task
// its slot on the provider's limit; two asynq servers paced by worker.Pacer
// run them, call a strict provider (429 beyond its limit) and record each
// task's result in Redis. It prints live progress and a summary measured on
// the provider's side, and accounts for every task enqueued: its result was
// collected, or asynq archived it.
//
//	go run ./examples/batch                          # embedded Redis (miniredis)
//	go run ./examples/batch -redis 127.0.0.1:6379    # or redis://host:port/db, rediss://...
//	go run -tags chart ./examples/batch -plot calls.svg  # and a chart of the calls
//
// With no -redis it uses an embedded Redis (miniredis, in this process) for
// the limiter and for asynq, and says so. A 429 pauses the provider's key for
// every server (worker.TooManyRequests) and reschedules the task without
// using a retry. Package demo (examples/internal/demo) holds the plumbing it
// shares with the crawler: connecting, progress, the summary line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/examples/internal/chart"
	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/scheduler"
	"github.com/pacer-go/pacer/worker"
	"github.com/redis/go-redis/v9"
)

const (
	taskType = "item:fetch"  // the tasks of the batch
	apiHost  = "api.example" // the provider's host, and the key it is paced on
)

// config is what the flags set.
type config struct {
	RedisURL      string  // the -redis flag: "" for the embedded Redis
	Tasks         int     // tasks enqueued at once
	Servers       int     // asynq servers, in this process
	Concurrency   int     // workers per server
	Rate          float64 // pacer's limit, calls/s
	Burst         int
	ProviderLimit int // the provider's limit, calls in any 1 s
	Progress      time.Duration
	Plot          string        // an SVG chart of the calls per 100 ms, or ""
	Timeout       time.Duration // how long to wait for every task to be accounted for
}

// summary is the run as the provider saw it (calls, 429s, rate, busiest
// second), and what became of the tasks.
type summary struct {
	demo.Summary
	Archived int // tasks asynq archived (gave up on)
	Results  int // tasks whose result was collected
	Lost     int // tasks enqueued but neither collected nor archived
}

func (s summary) String() string {
	return fmt.Sprintf("%v archived=%d", s.Summary, s.Archived)
}

func main() {
	// go-redis's own lines (a dial error per failed call while Redis is
	// down) go to slog at Debug level; pacer logs each outage once.
	redis.SetLogger(reserve.RedisLogger(nil))
	var c config
	flag.StringVar(&c.RedisURL, "redis", "", demo.RedisFlagUsage)
	flag.IntVar(&c.Tasks, "tasks", 300, "tasks the producer enqueues at once")
	flag.IntVar(&c.Servers, "servers", 2, "asynq servers (in this process)")
	flag.IntVar(&c.Concurrency, "concurrency", 20, "workers per asynq server")
	flag.Float64Var(&c.Rate, "rate", 0, "pacer's rate, calls per second (default: -provider-limit minus -burst)")
	flag.IntVar(&c.Burst, "burst", 0, "pacer's burst (default 1)")
	flag.IntVar(&c.ProviderLimit, "provider-limit", 21, "the provider's limit: calls in any second; pacer's limit is derived from it (reserve.Sliding)")
	flag.DurationVar(&c.Progress, "progress", time.Second, "how often to print progress (0: never)")
	flag.StringVar(&c.Plot, "plot", "", "write a chart of the calls per 100 ms to this SVG file (a build with -tags chart)")
	flag.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "how long to wait for every task to complete or be archived")
	flag.Parse()
	s, err := run(context.Background(), c, os.Stderr)
	if s.Calls > 0 {
		fmt.Println(s)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run enqueues the batch, runs it to the end and returns the summary;
// progress goes to out. If some task was neither completed nor archived
// within c.Timeout, it returns the summary and an error.
func run(ctx context.Context, c config, out io.Writer) (summary, error) {
	if c.Plot != "" {
		if err := chart.Check("./examples/batch"); err != nil {
			return summary{}, err
		}
	}
	if c.Tasks < 1 || c.Servers < 1 || c.Concurrency < 1 || c.ProviderLimit < 1 || c.Timeout <= 0 {
		return summary{}, errors.New("batch: -tasks, -servers, -concurrency and -provider-limit must be at least 1, -timeout positive")
	}
	// The provider's limit is given; pacer's is derived from it.
	lim, warn, err := demo.PacerLimit(c.ProviderLimit, c.Rate, c.Burst)
	if err != nil {
		return summary{}, fmt.Errorf("batch: -provider-limit, -rate, -burst: %w", err)
	}
	if warn != "" {
		fmt.Fprintln(out, "batch:", warn)
	}
	c.Rate, c.Burst = lim.Rate, lim.Burst
	p, err := provider.Start(provider.Options{Limit: c.ProviderLimit})
	if err != nil {
		return summary{}, err
	}
	defer p.Close()

	r, err := demo.Connect(c.RedisURL, out, " for the limiter and asynq")
	if err != nil {
		return summary{}, fmt.Errorf("batch: %w", err)
	}
	defer r.Close()
	rdb, o := r.Client, r.Options
	conn := asynq.RedisClientOpt{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	// A fresh limiter key, queue and result hash each run.
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	b := &batch{
		c:       c,
		rdb:     rdb,
		queue:   "pacer-batch-" + runID,
		results: "pacer:batch:" + runID + ":results",
		api:     p.URL(),
		http:    &http.Client{Timeout: 10 * time.Second},
	}
	demo.PrintWatch(out, r, "pacer:batch:"+runID+":")
	ropts := reserve.Options{
		KeyPrefix:    "pacer:batch:" + runID + ":",
		Logger:       slog.New(slog.NewTextHandler(out, nil)),
		RequireRedis: true, // as in README's quick start: a wrong -redis fails here
	}
	if r.Embedded() {
		// The producer reserves all its tasks' slots in one script call:
		// on miniredis, on a loaded machine (a -race build beside other
		// work), that took over CallTimeout's 250 ms and the run failed.
		ropts.CallTimeout = 5 * time.Second
	}
	limiter, err := reserve.New(rdb, ropts)
	if err != nil {
		return summary{}, err
	}
	defer limiter.Close()
	// The producer and the workers pace with the same function, so the
	// workers redeem the slots the producer reserved.
	pace := func(t *asynq.Task) (reserve.Request, bool) {
		return reserve.Single(apiHost, lim, 1), t.Type() == taskType
	}
	paced, err := worker.New(limiter, worker.Options{Pace: pace})
	if err != nil {
		return summary{}, err
	}

	insp := asynq.NewInspector(conn)
	defer insp.Close()
	defer b.cleanup(insp)
	for i := range c.Servers {
		srv, err := b.server(conn, paced, i, out)
		if err != nil {
			return summary{}, err
		}
		defer srv.Shutdown()
	}

	// The producer: the whole batch at once, each task at its slot.
	client := asynq.NewClient(conn)
	defer client.Close()
	enq, err := scheduler.NewEnqueuer(client, limiter, scheduler.Options{Pace: pace})
	if err != nil {
		return summary{}, err
	}
	tasks := make([]*asynq.Task, c.Tasks)
	for i := range tasks {
		payload, _ := json.Marshal(item{ID: i})
		tasks[i] = asynq.NewTask(taskType, payload)
	}
	start := time.Now()
	stopProgress := progress(out, p, b, insp, start)
	defer stopProgress()
	infos, err := enq.Enqueue(ctx, tasks, asynq.Queue(b.queue))
	if err != nil {
		return summary{}, fmt.Errorf("batch: enqueue: %w", err)
	}
	fmt.Fprintf(out, "enqueued %d tasks in %v; the last is due in %.1fs\n",
		len(infos), time.Since(start).Round(time.Millisecond), time.Until(infos[len(infos)-1].NextProcessAt).Seconds())

	waitErr := b.wait(ctx, insp)
	d := time.Since(start)
	stopProgress()
	s := summary{Summary: demo.Summarize(p.Stats(), c.Rate, c.Burst, d)}
	s.Results, s.Archived, err = b.account(ctx, insp)
	if err != nil {
		return s, err
	}
	s.Lost = c.Tasks - s.Results - s.Archived
	fmt.Fprintf(out, "results collected for %d of %d tasks, %d archived, %d lost\n", s.Results, c.Tasks, s.Archived, s.Lost)
	if c.Plot != "" {
		title := fmt.Sprintf("batch: %d tasks, %d asynq servers x %d workers, %g/s", c.Tasks, c.Servers, c.Concurrency, c.Rate)
		if err := chart.WriteFile(c.Plot, chart.Chart{Title: title, Start: start, Rate: c.Rate, ProviderLimit: c.ProviderLimit,
			Series: chart.Hosts(p.Calls(), p.Rejections())}); err != nil {
			return s, err
		}
		fmt.Fprintf(out, "wrote the chart of the calls per 100 ms to %s\n", c.Plot)
	}
	return s, waitErr
}

// batch is one run's pipeline.
type batch struct {
	c       config
	rdb     redis.UniversalClient
	queue   string // the asynq queue of this run
	results string // the Redis hash of results: task's item ID -> result
	api     string // the provider's base URL
	http    *http.Client
}

// item is a task's payload.
type item struct {
	ID int `json:"id"`
}

// server starts asynq server i, whose handler calls the provider at the
// slots the worker.Pacer middleware gives it.
func (b *batch) server(conn asynq.RedisConnOpt, paced *worker.Pacer, i int, out io.Writer) (*asynq.Server, error) {
	// worker.Config: a reschedule to a slot (or after a 429) is not a
	// failure, uses no retry, and is kept from the error handler.
	srv := asynq.NewServer(conn, worker.Config(asynq.Config{
		Concurrency:     b.c.Concurrency,
		Queues:          map[string]int{b.queue: 1},
		Logger:          &logger{out: out, prefix: fmt.Sprintf("asynq server %d: ", i)},
		LogLevel:        asynq.WarnLevel,
		ShutdownTimeout: 2 * time.Second,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			id, _ := asynq.GetTaskID(ctx)
			fmt.Fprintf(out, "server %d: task %s: %v\n", i, id, err)
		}),
	}))
	mux := asynq.NewServeMux()
	mux.Use(paced.Middleware)
	mux.HandleFunc(taskType, b.handle(i))
	if err := srv.Start(mux); err != nil {
		return nil, fmt.Errorf("batch: start asynq server %d: %w", i, err)
	}
	return srv, nil
}

// handle is server i's handler: the middleware has slept until the task's
// slot (or rescheduled it), so it calls the provider at once and records
// the result.
func (b *batch) handle(server int) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		var it item
		if err := json.Unmarshal(t.Payload(), &it); err != nil {
			return fmt.Errorf("batch: payload %q: %v: %w", t.Payload(), err, asynq.SkipRetry)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/item/%d", b.api, it.ID), nil)
		if err != nil {
			return err
		}
		req.Host = apiHost
		req.Header.Set("X-Client", fmt.Sprintf("server-%d", server))
		resp, err := b.http.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		// A 429 pauses the key for every server and reschedules the task
		// after the pause, without using a retry.
		if err := worker.TooManyRequests(ctx, resp.StatusCode, resp.Header.Get("Retry-After")); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("batch: item %d: provider answered %s", it.ID, resp.Status)
		}
		return b.rdb.HSet(ctx, b.results, strconv.Itoa(it.ID), strings.TrimSpace(string(body))).Err()
	}
}

// wait polls until every task is accounted for (its result collected, or
// archived) or c.Timeout passes.
func (b *batch) wait(ctx context.Context, insp *asynq.Inspector) error {
	ctx, cancel := context.WithTimeout(ctx, b.c.Timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := b.rdb.HLen(ctx, b.results).Result()
		if err == nil && int(done) < b.c.Tasks {
			var q *asynq.QueueInfo
			if q, err = insp.GetQueueInfo(b.queue); err == nil {
				done += int64(q.Archived)
			}
		}
		if err == nil && int(done) >= b.c.Tasks {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("batch: %d of %d tasks accounted for after %v (last error: %v): %w", done, b.c.Tasks, b.c.Timeout, err, ctx.Err())
		case <-tick.C:
		}
	}
}

// account counts the tasks whose result was collected (each task's own
// result, under its item ID) and those asynq archived.
func (b *batch) account(ctx context.Context, insp *asynq.Inspector) (results, archived int, err error) {
	got, err := b.rdb.HGetAll(ctx, b.results).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("batch: results: %w", err)
	}
	for i := range b.c.Tasks {
		if r, ok := got[strconv.Itoa(i)]; ok && r == fmt.Sprintf("ok /item/%d", i) {
			results++
		}
	}
	q, err := insp.GetQueueInfo(b.queue)
	if err != nil {
		return results, 0, fmt.Errorf("batch: queue %s: %w", b.queue, err)
	}
	return results, q.Archived, nil
}

// cleanup deletes the run's queue and results from Redis: the queue, and
// asynq's counters for it, which DeleteQueue leaves (every key of the
// queue's hash tag; the queue's name is this run's). The limiter's keys
// expire by themselves.
func (b *batch) cleanup(insp *asynq.Inspector) {
	ctx := context.Background()
	_ = insp.DeleteQueue(b.queue, true)
	keys := []string{b.results}
	iter := b.rdb.Scan(ctx, 0, "asynq:{"+b.queue+"}:*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	_ = b.rdb.Del(ctx, keys...).Err()
}

// progress prints calls, 429s, the rate over the last interval and where
// the tasks are, every b.c.Progress, until stopped. Stopping twice is fine.
func progress(out io.Writer, p *provider.Server, b *batch, insp *asynq.Inspector, start time.Time) (stop func()) {
	every := b.c.Progress
	if every > 0 {
		fmt.Fprintln(out, "tasks: scheduled = waiting in asynq until their slot is near; pending = due, waiting for a worker; "+
			"active = with a worker (most asleep until their slot); rescheduled = put back by pacer for a later slot or "+
			"after a 429 (asynq's retry state, but no retry is used up); archived = given up by asynq")
	}
	prev := 0
	return demo.Every(every, func() {
		st := p.Stats()
		line := fmt.Sprintf("t=%4.1fs calls=%d 429s=%d rate=%.1f/s (limit %g)",
			time.Since(start).Seconds(), st.Accepted+st.Rejected, st.Rejected, float64(st.Accepted-prev)/every.Seconds(), b.c.Rate)
		prev = st.Accepted
		if n, err := b.rdb.HLen(context.Background(), b.results).Result(); err == nil {
			line += fmt.Sprintf(" results=%d/%d", n, b.c.Tasks)
		}
		if q, err := insp.GetQueueInfo(b.queue); err == nil {
			line += fmt.Sprintf("  tasks: scheduled=%d pending=%d active=%d rescheduled=%d archived=%d",
				q.Scheduled, q.Pending, q.Active, q.Retry, q.Archived)
		}
		fmt.Fprintln(out, line)
	})
}

// logger sends asynq's warnings and errors to out.
type logger struct {
	out    io.Writer
	prefix string
}

func (l *logger) Debug(args ...any) {}
func (l *logger) Info(args ...any)  {}
func (l *logger) Warn(args ...any)  { fmt.Fprint(l.out, l.prefix+"warning: "+fmt.Sprintln(args...)) }
func (l *logger) Error(args ...any) { fmt.Fprint(l.out, l.prefix+"error: "+fmt.Sprintln(args...)) }
func (l *logger) Fatal(args ...any) { fmt.Fprint(l.out, l.prefix+"fatal: "+fmt.Sprintln(args...)) }
