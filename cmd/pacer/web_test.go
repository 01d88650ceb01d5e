package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/reserve"
)

// webToken is the token of the tests' write-mode servers.
const webToken = "test-token-0123456789abcdef"

// webClient is pacer web's handlers, in this process, on the fixture's
// Redis.
type webClient struct {
	t              *testing.T
	srv            *httptest.Server
	stdout, stderr *syncbuf.Buffer
}

func (f *fixture) web(o webOptions) *webClient {
	f.t.Helper()
	w := &webClient{t: f.t, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	c := &cli{stdout: w.stdout, stderr: w.stderr, redisURL: f.srv.URL, prefix: f.prefix, flagsInit: true}
	if err := c.connect(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	if o.interval == 0 {
		o.interval = 100 * time.Millisecond
	}
	w.srv = httptest.NewServer(newWebServer(c, o).handler())
	f.t.Cleanup(func() {
		w.srv.Close()
		c.close()
	})
	return w
}

// do sends a request: body (JSON) for a POST, and token as a bearer token
// ("" none); it returns the status and the body.
func (w *webClient) do(method, path, body, token string, header ...string) (int, string) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// webStatusJSON is what the tests read of GET /api/status.
type webStatusJSON struct {
	Write  bool     `json:"write"`
	Errors []string `json:"errors"`
	Keys   []struct {
		Key         string   `json:"key"`
		Limit       string   `json:"limit"`
		Source      string   `json:"source"`
		Binding     string   `json:"binding"`
		Frees       int64    `json:"frees_ns"`
		Paused      int64    `json:"paused_ns"`
		Admissions  *float64 `json:"admissions_per_s"`
		RateBand    string   `json:"rate_band"`
		Rate        float64  `json:"rate"`
		Use         *float64 `json:"use_per_s"`
		BandTexts   []string `json:"band_texts"`
		TenantTexts []string `json:"tenant_texts"`
		SeatTexts   []string `json:"seat_texts"`
		Bands       []struct {
			Name string `json:"name"`
			Wait int64  `json:"wait_ns"`
		} `json:"bands"`
		History []struct {
			Op     string `json:"op"`
			Who    string `json:"who"`
			Reason string `json:"reason"`
			Text   string `json:"text"`
		} `json:"history"`
		HistoryTotal int `json:"history_total"`
	} `json:"keys"`
	Fleet []struct {
		ID   string `json:"id"`
		Mode string `json:"mode"`
	} `json:"fleet"`
	FleetSummary string `json:"fleet_summary"`
}

func (w *webClient) status() webStatusJSON {
	w.t.Helper()
	code, body := w.do("GET", "/api/status", "", "")
	if code != http.StatusOK {
		w.t.Fatalf("GET /api/status = %d %s", code, body)
	}
	var st webStatusJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		w.t.Fatalf("GET /api/status: %v: %s", err, body)
	}
	return st
}

// TestWebRead: the page, its assets and the read API, on a read-only
// server: a key's limit, binding band, queue, tenants' stored weights and
// history, the fleet; slots granted per second from the second read on; an
// unknown key's history is a 404; a Host that is not loopback is refused.
func TestWebRead(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 3)
	f.waitSource("api", "code")
	ctx := context.Background()
	if _, err := f.admin.SetWeight(ctx, "api", "acme", 2, "ops", "acme's plan"); err != nil {
		t.Fatal(err)
	}
	w := f.web(webOptions{})

	code, body := w.do("GET", "/", "", "")
	if code != http.StatusOK || !strings.Contains(body, `<script src="static/app.js" defer></script>`) {
		t.Errorf("GET / = %d %.200s; want the page", code, body)
	}
	for path, typ := range map[string]string{"/static/app.js": "text/javascript", "/static/style.css": "text/css"} {
		resp, err := http.Get(w.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) {
			t.Errorf("GET %s = %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), typ)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}

	st := w.status()
	if st.Write || len(st.Errors) != 0 || len(st.Keys) != 1 {
		t.Fatalf("GET /api/status = %+v; want one key, read-only, no error", st)
	}
	k := st.Keys[0]
	if k.Key != "api" || k.Limit != "permits: 0.0001/s, burst 2" || k.Source != "code" || k.RateBand != "permits" || k.Rate != 0.0001 {
		t.Errorf("key %+v; want api's limit from its code", k)
	}
	// 3 permits on a burst of 2: one queued, 10,000 s apart.
	if k.Binding != "permits" || k.Frees <= 0 || len(k.Bands) != 1 || k.Bands[0].Wait != k.Frees {
		t.Errorf("key %+v; want permits binding, freeing when its band's wait ends", k)
	}
	if k.Admissions != nil {
		t.Errorf("first read: admissions %v, want null (n/a)", *k.Admissions)
	}
	if len(k.BandTexts) != 1 || !strings.HasPrefix(k.BandTexts[0], "permits: last slot in ") || !strings.HasSuffix(k.BandTexts[0], ", 1.0 permits queued") {
		t.Errorf("band texts %q", k.BandTexts)
	}
	if len(k.TenantTexts) != 1 || k.TenantTexts[0] != `"acme" idle, stored weight 2` {
		t.Errorf("tenant texts %q", k.TenantTexts)
	}
	if k.SeatTexts == nil || len(k.SeatTexts) != 0 {
		t.Errorf("seat texts %q, want [] (no in-flight band)", k.SeatTexts)
	}
	if k.HistoryTotal != 1 || len(k.History) != 1 || k.History[0].Who != "ops" || k.History[0].Reason != "acme's plan" ||
		k.History[0].Text != `weight of tenant "acme": none -> 2` {
		t.Errorf("history %+v (of %d)", k.History, k.HistoryTotal)
	}
	if len(st.Fleet) != 1 || st.Fleet[0].Mode != "redis" || !strings.HasPrefix(st.FleetSummary, "fleet: 1 Limiter, 1 on Redis, 0 pacing locally") {
		t.Errorf("fleet %+v %q", st.Fleet, st.FleetSummary)
	}
	// A read half an interval later or more is a new sample: nothing was
	// reserved in between.
	time.Sleep(60 * time.Millisecond)
	if a := w.status().Keys[0].Admissions; a == nil || *a != 0 {
		t.Errorf("second read: admissions %v, want 0", a)
	}

	code, body = w.do("GET", "/api/history?key=api", "", "")
	var h []admin.Change
	if err := json.Unmarshal([]byte(body), &h); code != http.StatusOK || err != nil || len(h) != 1 || h[0].Who != "ops" {
		t.Errorf("GET /api/history?key=api = %d %s", code, body)
	}
	for _, tt := range []struct {
		method, path string
		header       []string
		code         int
		err          string // a regexp
	}{
		{"GET", "/api/history?key=nobody", nil, http.StatusNotFound, `^history: unknown key "nobody": no state, no stored limit and no live Limiter reports it`},
		{"GET", "/api/history", nil, http.StatusBadRequest, `^history: missing key`},
		{"GET", "/api/status", []string{"Host", "pacer.attacker.example"}, http.StatusForbidden, `^Host "pacer.attacker.example" is not a loopback name`},
		{"GET", "/", []string{"Host", "10.0.0.1:8080"}, http.StatusForbidden, `^Host "10.0.0.1:8080" is not a loopback name`},
		{"POST", "/api/pause", []string{"Authorization", "Bearer " + webToken}, http.StatusForbidden, `^read-only: this pacer web was started without -write`},
	} {
		code, body := w.do(tt.method, tt.path, "", "", tt.header...)
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != tt.code || !regexp.MustCompile(tt.err).MatchString(e.Error) {
			t.Errorf("%s %s %q = %d %s, want %d %s", tt.method, tt.path, tt.header, code, body, tt.code, tt.err)
		}
	}
	for _, host := range []string{"localhost:80", "127.0.0.1", "[::1]:8080"} {
		if code, body := w.do("GET", "/api/status", "", "", "Host", host); code != http.StatusOK {
			t.Errorf("GET /api/status with Host %q = %d %s, want 200", host, code, body)
		}
	}
	if code, _ := w.do("GET", "/api/pause", "", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/pause = %d, want 405", code)
	}
}

// TestWebWrites: a change is refused without -write, without the token or
// with a wrong one, and when its fields are what the command line refuses,
// and then changes nothing; with the token, pause, resume and set are
// made, and recorded with who and why, as the command's.
func TestWebWrites(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 3)
	f.waitSource("api", "code")
	if err := l.Close(); err != nil { // no heartbeat changes Redis from now on
		t.Fatal(err)
	}
	ro := f.web(webOptions{})
	w := f.web(webOptions{write: true, token: webToken})
	pause := `{"key":"api","duration":"10m","who":"alice","reason":"incident 7"}`

	before := f.snapshot()
	tests := []struct {
		name, path, body, token string
		header                  []string
		server                  *webClient
		code                    int
		err                     string // a regexp
	}{
		{name: "read-only", server: ro, path: "/api/pause", body: pause, token: webToken, code: 403, err: `^read-only: this pacer web was started without -write`},
		{name: "no token", path: "/api/pause", body: pause, code: 401, err: `^the token is missing or wrong`},
		{name: "wrong token", path: "/api/pause", body: pause, token: "test-token-0123456789abcdeF", code: 401, err: `^the token is missing or wrong`},
		{name: "longer token", path: "/api/pause", body: pause, token: webToken + "0", code: 401, err: `^the token is missing or wrong`},
		{name: "token prefix", path: "/api/pause", body: pause, token: webToken[:16], code: 401, err: `^the token is missing or wrong`},
		{name: "basic auth", path: "/api/pause", body: pause, header: []string{"Authorization", "Basic " + webToken}, code: 401, err: `^the token is missing or wrong`},
		{name: "token in a cookie", path: "/api/pause", body: pause, header: []string{"Cookie", "token=" + webToken}, code: 401, err: `^the token is missing or wrong`},
		{name: "form post", path: "/api/pause", body: "key=api", token: webToken, header: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: 415, err: `^pause: want a JSON body`},
		{name: "bad JSON", path: "/api/pause", body: `{"key":`, token: webToken, code: 400, err: `^pause: the request's body: unexpected EOF`},
		{name: "unknown field", path: "/api/pause", body: `{"key":"api","duration":"10m","who":"a","reason":"b","force":true}`, token: webToken, code: 400, err: `^pause: the request's body: json: unknown field "force"`},
		{name: "two objects", path: "/api/pause", body: pause + pause, token: webToken, code: 400, err: `^pause: the request's body: more than one JSON object`},
		{name: "pause no key", path: "/api/pause", body: `{"duration":"10m","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^pause: empty KEY`},
		{name: "pause no duration", path: "/api/pause", body: `{"key":"api","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^pause: empty DURATION`},
		{name: "pause bad duration", path: "/api/pause", body: `{"key":"api","duration":"soon","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^pause: DURATION "soon": want a positive duration`},
		{name: "pause negative", path: "/api/pause", body: `{"key":"api","duration":"-5s","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^pause: DURATION "-5s": want a positive duration`},
		{name: "pause too long", path: "/api/pause", body: `{"key":"api","duration":"87601h","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^pause: DURATION "87601h": too long`},
		{name: "pause no who", path: "/api/pause", body: `{"key":"api","duration":"10m","reason":"b"}`, token: webToken, code: 400, err: `^pause: who is required`},
		{name: "pause blank reason", path: "/api/pause", body: `{"key":"api","duration":"10m","who":"a","reason":"  "}`, token: webToken, code: 400, err: `^pause: --reason is required`},
		{name: "pause unknown key", path: "/api/pause", body: `{"key":"nobody","duration":"10m","who":"a","reason":"b"}`, token: webToken, code: 404, err: `^pause: unknown key "nobody"`},
		{name: "resume not paused", path: "/api/resume", body: `{"key":"api","who":"a","reason":"b"}`, token: webToken, code: 409, err: `^resume: key "api" is not paused: nothing changed`},
		{name: "resume unknown key", path: "/api/resume", body: `{"key":"nobody","who":"a","reason":"b"}`, token: webToken, code: 404, err: `^resume: unknown key "nobody"`},
		{name: "set rate 0", path: "/api/set", body: `{"key":"api","rate":"0","burst":"1","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --rate "0": want a positive, finite number of permits per second`},
		{name: "set no burst", path: "/api/set", body: `{"key":"api","rate":"1","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --burst is required`},
		{name: "set nothing", path: "/api/set", body: `{"key":"api","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: give --rate and --burst`},
		{name: "set bucket and window", path: "/api/set", body: `{"key":"api","rate":"1","burst":"1","n":"5","window":"1m","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --rate and --burst make a bucket`},
		{name: "set per unknown", path: "/api/set", body: `{"key":"api","n":"5","per":"fortnight","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --per "fortnight": want day, week or month`},
		{name: "set tz unknown", path: "/api/set", body: `{"key":"api","n":"5","per":"day","tz":"Mars/Olympus","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --tz "Mars/Olympus": unknown time zone`},
		{name: "set tz without per", path: "/api/set", body: `{"key":"api","n":"5","tz":"UTC","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: --tz "UTC" is the zone of a calendar window`},
		{name: "set a file", path: "/api/set", body: `{"key":"api","file":"/etc/passwd","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: the request's body: json: unknown field "file"`},
		{name: "set unknown band", path: "/api/set", body: `{"key":"api","band":"tokenz","rate":"1","burst":"1","who":"a","reason":"b"}`, token: webToken, code: 409,
			err: `^set: unknown band "tokenz" on key "api" \(its bands: permits\): check the name, or add the band with --add; nothing changed`},
		{name: "set rate as a number", path: "/api/set", body: `{"key":"api","rate":5,"burst":"1","who":"a","reason":"b"}`, token: webToken, code: 400, err: `^set: the request's body: json: cannot unmarshal number`},
		{name: "set no reason", path: "/api/set", body: `{"key":"api","rate":"1","burst":"1","who":"a"}`, token: webToken, code: 400, err: `^set: --reason is required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := cmpOr(tt.server, w)
			code, body := srv.do("POST", tt.path, tt.body, tt.token, tt.header...)
			var e struct{ Error string }
			_ = json.Unmarshal([]byte(body), &e)
			if code != tt.code || !regexp.MustCompile(tt.err).MatchString(e.Error) {
				t.Errorf("POST %s %s = %d %s; want %d %s", tt.path, tt.body, code, body, tt.code, tt.err)
			}
			if after := f.snapshot(); !maps.Equal(before, after) {
				t.Errorf("POST %s %s changed Redis:\nbefore %v\nafter  %v", tt.path, tt.body, before, after)
			}
		})
	}
	if s := w.stderr.String(); !strings.Contains(s, "pacer web: refused a pause from 127.0.0.1:") {
		t.Errorf("stderr %q: want the refused changes", s)
	}

	ctx := context.Background()
	changes := []struct {
		path, body string
		message    string // a regexp
		op, who    string
	}{
		{"/api/pause", pause, `^api: paused by alice for 10m0s, fleet-wide`, "pause 10m0s", "alice"},
		{"/api/resume", `{"key":"api","who":"bob","reason":"provider is back"}`, `^api: resumed by bob \(its pause had 10m0s left\)`, "resume", "bob"},
		{"/api/set", `{"key":"api","rate":"5","burst":"1","who":"carol","reason":"ticket 812"}`,
			`^api: stored limit set by carol: none -> permits: 5/s, burst 1; every Limiter enforces it from its next reservation\n` +
				`api: the provider sees the new limit from \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(in [^:]+: 1\.0 permits already granted at the previous limit\); the calls already granted keep their slots$`, "set", "carol"},
		{"/api/set", `{"key":"api","n":"1500","per":"day","tz":"America/Los_Angeles","who":"dave","reason":"the provider's day"}`,
			`^api: stored limit set by dave: permits: 5/s, burst 1 -> permits: 1500/day America/Los_Angeles;`, "set", "dave"},
	}
	for i, ch := range changes {
		code, body := w.do("POST", ch.path, ch.body, webToken)
		var res webResult
		if err := json.Unmarshal([]byte(body), &res); err != nil || code != http.StatusOK || !res.OK || !regexp.MustCompile(ch.message).MatchString(res.Message) {
			t.Fatalf("POST %s %s = %d %s; want 200 %s", ch.path, ch.body, code, body, ch.message)
		}
		var req struct{ Reason string }
		_ = json.Unmarshal([]byte(ch.body), &req)
		h, err := f.admin.History(ctx, "api")
		if err != nil || len(h) != i+1 || h[0].Op != ch.op || h[0].Who != ch.who || h[0].Reason != req.Reason {
			t.Fatalf("after POST %s: History = %+v, %v; want %d entries, the latest %s by %s for %q", ch.path, h, err, i+1, ch.op, ch.who, req.Reason)
		}
		// The page's next read shows it.
		k := w.status().Keys[0]
		if k.HistoryTotal != i+1 || k.History[0].Who != ch.who || k.History[0].Reason != req.Reason {
			t.Errorf("after POST %s: the frame's history %+v", ch.path, k.History)
		}
		switch ch.path {
		case "/api/pause":
			// The queue (a slot 10,000 s ahead) outlasts the pause.
			if k.Paused <= 0 || k.Binding != "permits" || k.Frees <= k.Paused {
				t.Errorf("after the pause: paused %v, binding %q freeing in %v", k.Paused, k.Binding, k.Frees)
			}
		case "/api/resume":
			if k.Paused != 0 {
				t.Errorf("after the resume: paused %v", k.Paused)
			}
		case "/api/set":
			want := "permits: 5/s, burst 1"
			if ch.who == "dave" {
				want = "permits: 1500/day America/Los_Angeles"
			}
			if k.Source != "stored" || k.Limit != want {
				t.Errorf("after the set: limit %q from %s", k.Limit, k.Source)
			}
		}
	}
	out := w.stdout.String()
	for _, want := range []string{"pacer web: api: paused by alice", "pacer web: api: resumed by bob", "pacer web: api: stored limit set by carol"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout %q: want %q", out, want)
		}
	}
}

func cmpOr(a, b *webClient) *webClient {
	if a != nil {
		return a
	}
	return b
}

// TestWebServe: serveWeb answers until its context ends, then returns nil
// once the server is shut down; a request in flight sees its context end.
func TestWebServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-r.Context().Done() // until the shutdown
		}
		_, _ = io.WriteString(w, "ok")
	})
	served := make(chan error, 1)
	go func() { served <- serveWeb(ctx, ln, h, io.Discard) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
		slow <- err
	}()
	<-started
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serveWeb after its context ended = %v, want nil", err)
	}
	if err := <-slow; err != nil {
		t.Errorf("the request in flight: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Errorf("%s still accepts connections after the shutdown", ln.Addr())
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestWebCommand runs pacer web: it prints its URL on 127.0.0.1, serves
// the page and the API, and exits 0 on SIGINT or SIGTERM saying so; with
// -write and the token from PACER_WEB_TOKEN, it says changes are allowed.
func TestWebCommand(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 1)
	f.waitSource("api", "code")
	for _, tt := range []struct {
		name   string
		args   []string
		env    []string
		signal os.Signal
		mode   string
	}{
		{"read-only", nil, nil, os.Interrupt, "  read-only: -write with a token (PACER_WEB_TOKEN) allows set, pause and resume from the page\n"},
		{"write", []string{"-write"}, []string{"PACER_WEB_TOKEN=" + webToken}, syscall.SIGTERM,
			"  CHANGES ALLOWED (-write): set, pause and resume, each with the token, recorded with who and why\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(f.global(), append([]string{"web", "api*", "-addr", "127.0.0.1:0"}, tt.args...)...)...)
			cmd.Env = append(f.env, tt.env...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr := &syncbuf.Buffer{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill() }()
			r := bufio.NewReader(stdout)
			var banner strings.Builder
			for range 5 {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("pacer web's banner %q: %v (stderr %q)", banner.String(), err, stderr.String())
				}
				banner.WriteString(line)
			}
			m := regexp.MustCompile(`^pacer web: (http://127\.0\.0\.1:\d+/)\n  serving on 127\.0\.0\.1:\d+, loopback only: other hosts cannot reach it \(see -addr and -expose\)\n  keys "api\*" under prefix "` +
				regexp.QuoteMeta(f.prefix) + `" of the Redis at ` + regexp.QuoteMeta(f.srv.Addr) +
				`, read every 1s while a page is open\n` + regexp.QuoteMeta(tt.mode) + `  Ctrl-C or SIGTERM stops it\n$`).FindStringSubmatch(banner.String())
			if m == nil {
				t.Fatalf("pacer web's banner:\n%s", banner.String())
			}
			resp, err := http.Get(m[1] + "api/status")
			if err != nil {
				t.Fatal(err)
			}
			var st webStatusJSON
			err = json.NewDecoder(resp.Body).Decode(&st)
			_ = resp.Body.Close()
			if err != nil || len(st.Keys) != 1 || st.Keys[0].Key != "api" || st.Write != (tt.name == "write") {
				t.Errorf("GET %sapi/status = %+v, %v", m[1], st, err)
			}
			http.DefaultClient.CloseIdleConnections()
			if err := cmd.Process.Signal(tt.signal); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(r)
			err = cmd.Wait()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			if err != nil || string(rest) != "pacer web: stopped\n" || stderr.String() != "" {
				t.Errorf("after %v: exit %v, then stdout %q, stderr %q; want exit 0 and the stop line", tt.signal, err, rest, stderr.String())
			}
		})
	}
}

// TestWebOptions: what -addr, -expose, -write, -token and -interval take,
// before anything reaches Redis.
func TestWebOptions(t *testing.T) {
	const long = "0123456789abcdef"
	for _, tt := range []struct {
		o     webOptions
		env   string
		err   string // "" for none
		token string // the token in force after check
	}{
		{o: webOptions{addr: "127.0.0.1:8080"}},
		{o: webOptions{addr: "localhost:0"}},
		{o: webOptions{addr: "[::1]:8080"}},
		{o: webOptions{addr: "127.0.0.2:8080"}},
		{o: webOptions{addr: "0.0.0.0:8080"}, err: `web: -addr "0.0.0.0:8080" is host "0.0.0.0", not a loopback address: other hosts could reach the view over plain HTTP; pass -expose to mean it`},
		{o: webOptions{addr: ":8080"}, err: `web: -addr ":8080" is every interface, not a loopback address`},
		{o: webOptions{addr: "example.com:8080"}, err: `web: -addr "example.com:8080" is host "example.com", not a loopback address`},
		{o: webOptions{addr: "0.0.0.0:8080", expose: true}},
		{o: webOptions{addr: "127.0.0.1"}, err: `web: -addr "127.0.0.1": want host:port`},
		{o: webOptions{addr: "127.0.0.1:http"}, err: `web: -addr "127.0.0.1:http": port "http": want a number from 0 (a free port) to 65535`},
		{o: webOptions{addr: "127.0.0.1:65536"}, err: `web: -addr "127.0.0.1:65536": port "65536": want a number`},
		{o: webOptions{addr: "127.0.0.1:8080", write: true}, err: `web: -write needs a token: set PACER_WEB_TOKEN (or pass -token)`},
		{o: webOptions{addr: "127.0.0.1:8080", write: true, token: "   "}, err: `web: -write needs a token`},
		{o: webOptions{addr: "127.0.0.1:8080", write: true, token: "short"}, err: `web: the token has 5 characters: want at least 16`},
		{o: webOptions{addr: "127.0.0.1:8080", write: true}, env: long, token: long},
		{o: webOptions{addr: "127.0.0.1:8080", write: true, token: long + "!"}, env: long, token: long + "!"},
		{o: webOptions{addr: "127.0.0.1:8080", write: true}, env: "short", err: `web: the token has 5 characters`},
	} {
		o := tt.o
		if o.interval == 0 {
			o.interval = time.Second
		}
		err := o.check(tt.env)
		var ue *usageError
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("check(%+v) = %v, want nil", tt.o, err)
		case tt.err != "" && (!errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.err)):
			t.Errorf("check(%+v) = %v, want a usage error %q", tt.o, err, tt.err)
		case tt.err == "" && tt.token != "" && o.token != tt.token:
			t.Errorf("check(%+v) took token %q, want %q", tt.o, o.token, tt.token)
		}
	}
	for _, d := range []time.Duration{0, 99 * time.Millisecond, time.Minute + 1} {
		o := webOptions{addr: "127.0.0.1:0", interval: d}
		if err := o.check(""); err == nil || !strings.HasPrefix(err.Error(), "web: -interval "+d.String()+": want 100ms to 1m") {
			t.Errorf("check(-interval %v) = %v", d, err)
		}
	}
}

// TestWebBadRequests: requests a client got wrong are answered 4xx, never
// 500 or 409: a static path that is not UTF-8, and the fleet's own name
// ("limiters", reserve.ErrReservedKey) as a key, read or changed.
func TestWebBadRequests(t *testing.T) {
	f := newFixture(t)
	w := f.web(webOptions{write: true, token: webToken})
	for _, path := range []string{"/static/%ff", "/static/app.js%ff", "/static/%c3%28", "/static/nothing.js"} {
		if code, body := w.do("GET", path, "", ""); code != http.StatusNotFound {
			t.Errorf("GET %s = %d %.200s, want 404", path, code, body)
		}
	}
	before := f.snapshot()
	for _, tt := range []struct{ method, path, body string }{
		{"GET", "/api/history?key=limiters", ""},
		{"POST", "/api/pause", `{"key":"limiters","duration":"10s","who":"ops","reason":"x"}`},
		{"POST", "/api/resume", `{"key":"limiters","who":"ops","reason":"x"}`},
		{"POST", "/api/set", `{"key":"limiters","rate":"1","burst":"1","who":"ops","reason":"x"}`},
	} {
		code, body := w.do(tt.method, tt.path, tt.body, webToken)
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, `the key "limiters" is reserved for the fleet's records`) {
			t.Errorf("%s %s = %d %s, want 400 naming the reserved key", tt.method, tt.path, code, body)
		}
	}
	if after := f.snapshot(); !maps.Equal(before, after) {
		t.Errorf("the reserved key's requests changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}

// TestWebGaugeBinding: the gauge compares the key with the band that
// binds, in that band's units: on requests 1/s and tokens 0.1/s (burst
// 100), calls of 1 request and 100 tokens are spaced by tokens, so the
// gauge is tokens's, not the first bucket band's (issue 42: 31% of a band
// that does not bind while the key ran at 100% of its tokens band). Its
// use is tokens granted per second: 100 a slot, over the same two reads
// as the slots granted per second.
func TestWebGaugeBinding(t *testing.T) {
	f := newFixture(t)
	l := f.limiter()
	ctx := context.Background()
	req := reserve.Request{Key: "llm", Cost: reserve.Cost{"requests": 1, "tokens": 100}, Policy: reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 0.1, Burst: 100}},
	}}
	reserveN := func(n int) {
		t.Helper()
		for range n {
			if _, err := l.ReserveN(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	reserveN(4)
	f.waitSource("llm", "code")
	w := f.web(webOptions{})
	k := w.status().Keys[0]
	if k.Binding != "tokens" || k.RateBand != "tokens" || k.Rate != 0.1 {
		t.Errorf("first read: binding %q, gauge band %q at %v/s; want tokens, 0.1/s", k.Binding, k.RateBand, k.Rate)
	}
	if k.Use != nil {
		t.Errorf("first read: use %v, want null (n/a)", *k.Use)
	}
	time.Sleep(60 * time.Millisecond) // half an interval: a new read
	reserveN(2)
	k = w.status().Keys[0]
	if k.RateBand != "tokens" || k.Admissions == nil || k.Use == nil {
		t.Fatalf("second read: gauge band %q, admissions %v, use %v; want tokens and both known", k.RateBand, k.Admissions, k.Use)
	}
	if got, want := *k.Use, 100**k.Admissions; got < want*(1-1e-6) || got > want*(1+1e-6) {
		t.Errorf("second read: tokens granted %v/s with %v slots/s; want 100 tokens a slot", got, *k.Admissions)
	}
}
