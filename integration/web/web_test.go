package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The demo fleet's keys.
const (
	llmKey    = "api.llm.example"    // two bands, a queue deep enough that tokens binds
	githubKey = "api.github.example" // a stored limit and a pause, each with who and why
	stripeKey = "api.stripe.example" // live traffic from two tenants
	flakyKey  = "api.flaky.example"  // Redis fails it for one process: that process paces locally
)

// TestWebView runs pacer web on a demo fleet and reads, in headless
// Chromium, what a person sees: the keys, the binding band with a
// countdown that runs down between reads, the pause and its end, the
// history's who and why, the tenants, the fleet's processes with the one
// pacing locally highlighted; then a screenshot. Then, in write mode, it
// pauses a key from the page: refused with a wrong token, made with the
// right one, and recorded with who and why.
func TestWebView(t *testing.T) {
	chromium := findChromium(t)
	start := time.Now()
	srv := redistest.New(t)
	prefix := redistest.Prefix(t)
	ac, err := admin.New(srv.Client, admin.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	fleet := startFleet(t, srv, prefix, ac)
	bin := buildPacer(t)
	t.Logf("demo fleet and pacer built in %.1fs", time.Since(start).Seconds())

	browse := time.Now()
	b := startBrowser(t, chromium)
	web := startWeb(t, bin, srv.URL, prefix, nil)
	b.do(chromedp.Navigate(web.url))

	card := func(key string) string { return `section.key[data-key="` + key + `"]` }
	// The keys, each with its card.
	keys := b.waitText("#keys", func(s string) bool {
		return strings.Contains(s, llmKey) && strings.Contains(s, githubKey) && strings.Contains(s, stripeKey)
	})
	if strings.Contains(keys, "Change this key") {
		t.Errorf("a read-only view shows the change controls:\n%s", keys)
	}
	// The binding band of a queue, and a countdown that runs down.
	bindRe := regexp.MustCompile(`^binding: tokens — frees in (\d+m \d\ds|\d+\.\ds)$`)
	first := b.waitText(card(llmKey)+" .badge.binding", func(s string) bool { return bindRe.MatchString(s) })
	time.Sleep(1500 * time.Millisecond)
	second := b.waitText(card(llmKey)+" .badge.binding", func(s string) bool { return bindRe.MatchString(s) })
	d1, d2 := parseShown(t, bindRe.FindStringSubmatch(first)[1]), parseShown(t, bindRe.FindStringSubmatch(second)[1])
	if !(d2 < d1) || d2 <= 0 {
		t.Errorf("the countdown read %q, then 1.5s later %q: want it smaller, above 0", first, second)
	}
	b.waitText(card(llmKey)+" li.band.binding", func(s string) bool { return strings.HasPrefix(s, "tokens: last slot in ") })
	// The gauge compares the key with the band that binds, in its units
	// (issue 42: it read the first bucket band's).
	b.waitText(card(llmKey)+" .figure.granted", func(s string) bool {
		return strings.Contains(s, "of tokens: ") && strings.Contains(s, "/s of its units granted; it binds)")
	})
	// The pause, its end, and what binds a paused key.
	b.waitText(card(githubKey)+" .badge.paused", func(s string) bool {
		return regexp.MustCompile(`^paused — (9m [0-5]\d|10m 00)s left, until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(s)
	})
	b.waitText(card(githubKey)+" .badge.binding", func(s string) bool { return strings.HasPrefix(s, "binding: (pause) — frees in 9m ") })
	b.waitText(card(githubKey)+" .figure.limit", func(s string) bool {
		return strings.Contains(s, "permits: 2/s, burst 1") && strings.Contains(s, "stored by an operator")
	})
	// The history's who and why.
	b.waitText(card(githubKey)+" .history", func(s string) bool {
		return strings.Contains(s, "dana") && strings.Contains(s, "provider lowered us (ticket 812)") &&
			strings.Contains(s, "erin") && strings.Contains(s, "429 storm") && strings.Contains(s, "pause 10m0s")
	})
	// The rate granted against the limit, and the tenants.
	b.waitText(card(stripeKey)+" .figure.granted", func(s string) bool {
		return regexp.MustCompile(`\d+\.\d slots/s\n`).MatchString(s) && strings.Contains(s, "of permits: 4/s")
	})
	b.waitText(card(stripeKey)+" .tenants", func(s string) bool {
		return strings.Contains(s, `"acme"`) && strings.Contains(s, `"globex"`) && strings.Contains(s, `"initech" idle, stored weight 3`)
	})
	// The fleet's processes, the one pacing locally highlighted.
	b.waitText("#fleet", func(s string) bool {
		return strings.Contains(s, fleet.ids[0]) && strings.Contains(s, fleet.ids[1]) && strings.Contains(s, fleet.ids[2])
	})
	b.waitText("#fleet tr.degraded", func(s string) bool {
		return strings.Contains(s, fleet.ids[2]) && strings.Contains(s, "local: pacing locally")
	})
	if n := evaluate[int](b, `document.querySelectorAll('#fleet tr.degraded').length`); n != 1 {
		t.Errorf("%d processes highlighted as degraded, want 1", n)
	}
	b.waitText("#fleet-summary", func(s string) bool { return strings.Contains(s, "3 Limiters, 2 on Redis, 1 pacing locally") })

	shot := b.screenshot()
	t.Logf("read-only view checked in %.1fs", time.Since(browse).Seconds())
	web.stop()

	// Write mode: pause a key from the page.
	const token = "0123456789abcdef-test-token"
	web = startWeb(t, bin, srv.URL, prefix, []string{"-write"}, "PACER_WEB_TOKEN="+token)
	b.do(chromedp.Navigate(web.url))
	b.waitText("#access", func(s string) bool { return strings.HasPrefix(s, "changes allowed") })
	before, err := ac.History(context.Background(), llmKey)
	if err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-at-all"))
	b.do(chromedp.SendKeys(chromedp.CSS("#who"), "web-operator"))
	// Set, not typed: on a loaded machine, typed keys were lost ("provid"
	// reached the history); what is checked is what the page sends.
	b.setValue(card(llmKey)+" input.reason", "provider maintenance (ticket 99)")
	b.setValue(card(llmKey)+" input.duration", "5m")
	b.click(card(llmKey) + " button.do-pause")
	b.waitText(card(llmKey)+" .result.failed", func(s string) bool { return strings.Contains(s, "the token is missing or wrong") })
	if h, _ := ac.History(context.Background(), llmKey); len(h) != len(before) {
		t.Fatalf("a pause with a wrong token changed the history: %d entries, then %d", len(before), len(h))
	}
	b.setValue("#token", "")
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), token))
	b.click(card(llmKey) + " button.do-pause")
	b.waitText(card(llmKey)+" .result", func(s string) bool {
		return strings.Contains(s, llmKey+": paused by web-operator for 5m0s, fleet-wide")
	})
	b.waitText(card(llmKey)+" .badge.paused", func(s string) bool { return strings.HasPrefix(s, "paused — 4m ") })
	b.waitText(card(llmKey)+" .history", func(s string) bool {
		return strings.Contains(s, "web-operator") && strings.Contains(s, "provider maintenance (ticket 99)")
	})
	h, err := ac.History(context.Background(), llmKey)
	if err != nil || len(h) != len(before)+1 {
		t.Fatalf("History(%q) = %d entries, %v; want %d", llmKey, len(h), err, len(before)+1)
	}
	if got := h[0]; got.Op != "pause 5m0s" || got.Who != "web-operator" || got.Reason != "provider maintenance (ticket 99)" {
		t.Errorf("History(%q)[0] = %+v, want pause 5m0s by web-operator with the page's reason", llmKey, got)
	}
	// And resume the other key from it. The page shows a change's result
	// with the view read after the change, and a view read before it never
	// replaces that one. CI saw the result beside the old pause (2026-12-01),
	// so the page's status reads are slowed here: the one in flight at the
	// click, read before the change, arrives 2 s late; the others 300 ms.
	evaluate[bool](b, slowStatus)
	b.waitJS(`window.slowStatus.answered`, "a status read answered before the change")
	b.setValue(card(githubKey)+" input.reason", "the storm is over")
	b.click(card(githubKey) + " button.do-resume")
	b.waitText(card(githubKey)+" .result", func(s string) bool { return strings.Contains(s, githubKey+": resumed by web-operator") })
	paused := `document.querySelectorAll('` + card(githubKey) + ` .badge.paused').length`
	if n := evaluate[int](b, paused); n != 0 {
		t.Errorf("%s still shows a pause beside its resume's result", githubKey)
	}
	b.waitJS(`window.slowStatus.rendered`, "the status read before the change taken in")
	if n := evaluate[int](b, paused); n != 0 {
		t.Errorf("%s shows a pause again: a status read before the resume replaced the one after it", githubKey)
	}
	if st, err := ac.Status(context.Background(), githubKey); err != nil || st.Paused > 0 {
		t.Errorf("Status(%q) = paused %v, %v; want resumed", githubKey, st.Paused, err)
	}
	web.stop()
	t.Logf("the browser part took %.1fs (the whole test %.1fs)", time.Since(browse).Seconds(), time.Since(start).Seconds())

	b.checkConsole()
	checkScreenshot(t, shot)
}

// findChromium returns the browser to run, or skips (fails under CI unless
// PACER_BROWSER=skip says CI could not install it).
func findChromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("PACER_CHROMIUM")
	switch {
	case path != "":
		if _, err := os.Stat(path); err == nil {
			return path
		}
	default:
		path = "/usr/bin/chromium"
		if _, err := os.Stat(path); err == nil {
			return path
		}
		if p, err := exec.LookPath("chromium"); err == nil {
			return p
		}
	}
	msg := "no Chromium at " + path + " (apt-get install chromium, or set PACER_CHROMIUM)"
	if os.Getenv("CI") != "" && os.Getenv("PACER_BROWSER") != "skip" {
		t.Fatalf("%s: under CI the browser test of pacer web must run, unless .ci/run said it could not install Chromium (PACER_BROWSER=skip)", msg)
	}
	t.Skipf("%s: the browser test of pacer web is skipped", msg)
	return ""
}

// demoFleet is the fleet pacer web shows: its Limiters' ids, the last
// pacing locally.
type demoFleet struct {
	ids []string
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string) *reserve.Limiter {
	t.Helper()
	l, err := reserve.New(rdb, reserve.Options{
		KeyPrefix:         prefix,
		HeartbeatInterval: 200 * time.Millisecond,
		ProbeInterval:     200 * time.Millisecond,
		FailAfter:         1,
		CallTimeout:       10 * time.Second,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// startFleet starts three Limiters in this process: two pace the demo's
// keys, the third loses Redis for one key (a go-redis hook fails every
// command on it) and paces locally; and an operator's stored limit, pause
// and weight.
func startFleet(t *testing.T, srv *redistest.Server, prefix string, ac *admin.Client) demoFleet {
	t.Helper()
	ctx := context.Background()
	a := newLimiter(t, srv.Client, prefix)
	b := newLimiter(t, srv.NewClient(t), prefix)
	// A client set up as reserve wants it, or New would make its own
	// without the hook.
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	broken := redis.NewClient(opts)
	t.Cleanup(func() { _ = broken.Close() })
	broken.AddHook(failKey{key: prefix + "{" + flakyKey + "}"})
	c := newLimiter(t, broken, prefix)

	// Two bands; 20 calls of 200 tokens queue 90 s of tokens, 7.5 s of
	// requests: tokens binds.
	llm := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 2, Burst: 5}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 40, Burst: 400}},
	}
	for range 20 {
		if _, err := a.ReserveN(ctx, reserve.Request{Key: llmKey, Policy: llm, Cost: reserve.Cost{"requests": 1, "tokens": 200}}); err != nil {
			t.Fatal(err)
		}
	}
	// A stored limit and a pause, with who and why.
	gh := reserve.Limit{Rate: 5, Burst: 10}
	for range 3 {
		if _, err := b.Reserve(ctx, githubKey, gh); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ac.SetLimit(ctx, githubKey, reserve.Limit{Rate: 2, Burst: 1}.Policy(), false, "dana", "provider lowered us (ticket 812)"); err != nil {
		t.Fatal(err)
	}
	if err := ac.Pause(ctx, githubKey, 10*time.Minute, "erin", "429 storm"); err != nil {
		t.Fatal(err)
	}
	// Live traffic: two tenants share 4/s, weights 2 and 1; a third has a
	// stored weight and is idle.
	if _, err := ac.SetWeight(ctx, stripeKey, "initech", 3, "dana", "initech's plan"); err != nil {
		t.Fatal(err)
	}
	tctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	stripe := reserve.Limit{Rate: 4, Burst: 1}.Policy()
	for i, tenant := range []string{"acme", "acme", "acme", "globex", "globex", "globex"} {
		l := a
		if i%2 == 1 {
			l = b
		}
		weight := 2.0
		if tenant == "globex" {
			weight = 1
		}
		wg.Go(func() {
			for tctx.Err() == nil {
				_ = l.WaitN(tctx, reserve.Request{Key: stripeKey, Policy: stripe, Cost: reserve.Permits(1), Tenant: tenant, Weight: weight})
			}
		})
	}
	// The third Limiter fails on the flaky key, and paces locally.
	_, _ = c.Reserve(ctx, flakyKey, reserve.Limit{Rate: 1, Burst: 1})
	deadline := time.Now().Add(30 * time.Second)
	for {
		members, err := ac.Fleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var onRedis, local []string
		for _, m := range members {
			switch m.Mode {
			case "redis":
				onRedis = append(onRedis, m.ID)
			case "local":
				local = append(local, m.ID)
			}
		}
		if len(members) == 3 && len(onRedis) == 2 && len(local) == 1 {
			return demoFleet{ids: append(onRedis, local...)}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fleet() = %+v; want 3 Limiters, 2 on Redis and 1 local", members)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failKey is a go-redis hook that fails, as a lost connection would, every
// command that names key.
type failKey struct{ key string }

var errInjected = errors.New("injected: connection reset by peer")

func (h failKey) names(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.key) {
			return true
		}
	}
	return false
}

func (h failKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.names(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (h failKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.names(cmd) {
				for _, c := range cmds {
					c.SetErr(errInjected)
				}
				return errInjected
			}
		}
		return next(ctx, cmds)
	}
}

// buildPacer builds cmd/pacer into a temporary directory.
func buildPacer(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "pacer")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "..", "cmd", "pacer")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pacer: %v\n%s", err, out)
	}
	return bin
}

// webProcess is a running pacer web.
type webProcess struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	out  *bytes.Buffer // what it printed, once it exited
	done chan struct{}
}

// startWeb starts pacer web on a free loopback port, with the extra
// arguments and environment given, and reads the URL it prints.
func startWeb(t *testing.T, bin, redisURL, prefix string, args []string, env ...string) *webProcess {
	t.Helper()
	argv := append([]string{"-redis", redisURL, "-prefix", prefix, "web", "-addr", "127.0.0.1:0", "-interval", "500ms"}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &webProcess{t: t, cmd: cmd, out: &bytes.Buffer{}, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			w.out.WriteString(line + "\n")
			if u, ok := strings.CutPrefix(line, "pacer web: http://"); ok {
				urls <- "http://" + u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-w.done
			_ = cmd.Wait()
		}
	})
	select {
	case w.url = <-urls:
	case <-w.done:
		_ = cmd.Wait()
		t.Fatalf("pacer %s exited before printing its URL: %s\nstderr: %s", strings.Join(argv, " "), w.out, &stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("pacer web printed no URL in 30s")
	}
	return w
}

// stop sends SIGINT and checks that pacer web exits 0, saying so.
func (w *webProcess) stop() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		w.t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.t.Fatal("pacer web did not exit within 30s of SIGINT")
	}
	if err := w.cmd.Wait(); err != nil {
		w.t.Errorf("pacer web after SIGINT: %v; want exit 0", err)
	}
	if !strings.HasSuffix(w.out.String(), "pacer web: stopped\n") {
		w.t.Errorf("pacer web's output ends %q, want its stop line", w.out.String())
	}
}

// startBrowser starts headless Chromium, closed on cleanup, and a tab
// whose console messages it keeps.
func startBrowser(t *testing.T, path string) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	p := &page{t: t, ctx: ctx}
	read := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-read
		if t.Failed() {
			t.Logf("the page's console:\n%s", strings.Join(p.messages(), "\n"))
		}
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no timeout
		close(read)
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	go func() {
		defer close(read)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m)
			p.mu.Unlock()
		}
	}()
	return p
}

// page is the browser's tab.
type page struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

func (p *page) messages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.console {
		out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
	}
	return out
}

// checkConsole fails the test on an exception in the page or a
// Content-Security-Policy violation.
func (p *page) checkConsole() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.console {
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
			p.t.Errorf("the page's console: %s (%s:%d)", m, m.URL, m.Line+1)
		}
	}
}

// do runs actions, each within 30 s.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatal(err)
	}
}

func evaluate[T any](p *page, js string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// waitText waits until the innerText of the first element sel matches
// holds for ok, and returns it; it fails after 30 s with what it read.
func (p *page) waitText(sel string, ok func(string) bool) string {
	p.t.Helper()
	q, _ := json.Marshal(sel)
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.innerText : "<no element>"; })()`, q)
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		s := strings.TrimSpace(evaluate[string](p, js))
		if ok(s) {
			if d := time.Since(start); d > time.Second {
				p.t.Logf("waited %.1fs for %s", d.Seconds(), sel)
			}
			return s
		}
		if time.Now().After(deadline) {
			body := evaluate[string](p, `document.body.innerText`)
			p.t.Fatalf("the text of %s is %q, not what the test waits for; the page reads:\n%s", sel, s, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slowStatus makes the page's reads of api/status late. The first one
// is sent at once and handed to the page 2 s after its answer
// (slowStatus.answered: the server has read its view; slowStatus.rendered:
// the page has taken it in, since a timer set after the body is read runs
// after the page's code that awaits it); the others are handed over 300 ms
// late.
const slowStatus = `(() => {
  const fetch0 = window.fetch;
  const s = window.slowStatus = { sent: false, answered: false, rendered: false };
  const late = (r, ms, done) => new Promise(ok => setTimeout(() => {
    if (done) {
      const json = r.json.bind(r);
      r.json = async () => { const v = await json(); setTimeout(done, 0); return v; };
    }
    ok(r);
  }, ms));
  window.fetch = (u, o) => {
    if (!String(u).includes('api/status')) return fetch0(u, o);
    if (s.sent) return fetch0(u, o).then(r => late(r, 300));
    s.sent = true;
    return fetch0(u, o).then(r => { s.answered = true; return late(r, 2000, () => { s.rendered = true; }); });
  };
  return true;
})()`

// waitJS waits until the expression js is true; it fails after 30 s,
// saying what it waited for.
func (p *page) waitJS(js, what string) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !evaluate[bool](p, `!!(`+js+`)`) {
		if time.Now().After(deadline) {
			p.t.Fatalf("waited 30s for %s (%s)", what, js)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// click clicks the element sel from within the page, in one step: the
// cards are redrawn every refresh, and a node found by one DevTools call
// could be gone at the next ("Could not find node with given id" on a
// loaded machine, beside a CPU hog).
func (p *page) click(sel string) {
	p.t.Helper()
	q, _ := json.Marshal(sel)
	if !evaluate[bool](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.click(); return true; })()`, q)) {
		p.t.Fatalf("nothing to click at %s", sel)
	}
}

// setValue sets the value of the input sel.
func (p *page) setValue(sel, v string) {
	p.t.Helper()
	q, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	if !evaluate[bool](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.value = %s; return true; })()`, q, val)) {
		p.t.Fatalf("no input %s", sel)
	}
}

// screenshot takes a PNG of the whole page.
func (p *page) screenshot() []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatal(err)
	}
	return shot
}

// checkScreenshot checks that shot is a PNG of the page, not blank, and
// writes it to $PACER_WEB_SCREENSHOT if set.
func checkScreenshot(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() != 1280 || bounds.Dy() < 900 {
		t.Errorf("the screenshot is %dx%d, want 1280 wide and at least 900 high (the whole page)", bounds.Dx(), bounds.Dy())
	}
	if colors, inked := inkOf(img); colors < 20 || inked < 0.02 {
		t.Errorf("the screenshot looks blank: %d colors, %.1f%% of its pixels differ from the background", colors, 100*inked)
	}
	if path := os.Getenv("PACER_WEB_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the screenshot to %s (%d bytes)", path, len(shot))
	}
}

// inkOf counts img's distinct colors and the share of its pixels unlike
// its top left one (the background).
func inkOf(img image.Image) (int, float64) {
	b := img.Bounds()
	bg := fmt.Sprint(img.At(b.Min.X, b.Min.Y))
	colors := map[string]bool{}
	differ := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			c := fmt.Sprint(img.At(x, y))
			colors[c] = true
			if c != bg {
				differ++
			}
		}
	}
	return len(colors), float64(differ) / float64((b.Dx()/2+1)*(b.Dy()/2+1))
}

// parseShown reads a time the page shows: 850ms, 12.3s, 9m 58s, 2h 05m.
func parseShown(t *testing.T, s string) time.Duration {
	t.Helper()
	s = strings.ReplaceAll(s, " ", "")
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64)
		if err2 != nil {
			t.Fatalf("the page shows %q, not a time", s)
		}
		d = time.Duration(n * float64(time.Second))
	}
	return d
}
