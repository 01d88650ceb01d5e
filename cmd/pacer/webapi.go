package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
)

// webui is the page: plain HTML, CSS and JavaScript, nothing built.
//
//go:embed webui
var webui embed.FS

// webHistory is how many of a key's latest changes a frame carries
// (GET /api/history gives them all).
const webHistory = 10

// A webFrame is what GET /api/status returns: watch's frame, with what
// the page shows beside it.
type webFrame struct {
	Now      time.Time     `json:"now"` // Redis's clock
	Prefix   string        `json:"prefix"`
	Pattern  string        `json:"pattern"`
	Redis    string        `json:"redis"` // its address, never a password
	Write    bool          `json:"write"` // whether changes are allowed (-write)
	Interval time.Duration `json:"interval_ns"`
	// Age is how long before this answer the frame was read (frames are
	// read at most every half interval, whatever the number of pages).
	Age          time.Duration  `json:"age_ns"`
	Keys         []webKey       `json:"keys"`
	Fleet        []admin.Member `json:"fleet"`
	FleetSummary string         `json:"fleet_summary"`
	Errors       []string       `json:"errors"`
}

// A webKey is one key of a frame: status's view of it, and the words
// status and history print for it, so that the page says what they say.
type webKey struct {
	keyView
	// RateBand and Rate are the band the page's gauge compares the key
	// with, and its rate (units per second): the bucket band that binds
	// (KeyStatus.Binding), or when none does (nothing waits, a window or
	// the pause binds) the bucket band closest to binding, the one whose
	// Spare is the least part of its burst, the first on a tie ("" and 0:
	// no bucket band). Use is that band's units granted per second
	// between the last two reads: its rate less its balance's growth per
	// second, exact when the bucket stayed below its burst from one read
	// to the next (as a band with a queue does); nil when it cannot be
	// told (the first read, the band new or unknown at the previous one,
	// or the bucket full in between: it ran under its rate). The page then
	// compares the slots granted per second, which count one unit each.
	RateBand string   `json:"rate_band"`
	Rate     float64  `json:"rate"`
	Use      *float64 `json:"use_per_s"`
	// Spark is the last minute of slots granted per second, and Queue the
	// time to the last slot granted, as watch draws them.
	Spark      string `json:"spark"`
	QueueSpark string `json:"queue_spark"`
	// BandTexts are status's queue lines, one per band of Bands; Tenants
	// status's tenants lines.
	BandTexts   []string `json:"band_texts"`
	TenantTexts []string `json:"tenant_texts"`
	// SeatTexts are status's in-flight lines (none without an in-flight
	// band): the seats in use, N and the calls waiting, then the holders.
	SeatTexts []string `json:"seat_texts"`
	// History is the latest changes, newest first, of HistoryTotal.
	History      []webChange `json:"history"`
	HistoryTotal int         `json:"history_total"`
}

// A webChange is one change of a key's history, with the words history
// prints for what it did.
type webChange struct {
	admin.Change
	Text string `json:"text"`
}

func newWebChanges(h []admin.Change) []webChange {
	out := make([]webChange, len(h))
	for i, ch := range h {
		out[i] = webChange{Change: ch, Text: changeText(ch)}
	}
	return out
}

// handler is the page, the API, and the checks every request passes.
func (s *webServer) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webui, "webui")
	index, _ := fs.ReadFile(static, "index.html")
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(notFoundFS{static})))
	mux.HandleFunc("GET /api/status", s.status)
	mux.HandleFunc("GET /api/history", s.history)
	mux.HandleFunc("POST /api/set", s.change("set", s.set))
	mux.HandleFunc("POST /api/pause", s.change("pause", s.pause))
	mux.HandleFunc("POST /api/resume", s.change("resume", s.resume))
	return s.guard(mux)
}

// notFoundFS is the page's files, where a name no file could have (not
// UTF-8, say: embed.FS answers fs.ErrInvalid, which http.FileServerFS
// makes a 500) is not found, a 404 as any other.
type notFoundFS struct{ fs.FS }

func (f notFoundFS) Open(name string) (fs.File, error) {
	file, err := f.FS.Open(name)
	if errors.Is(err, fs.ErrInvalid) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return file, err
}

// guard sets the headers every answer carries and, unless -expose, refuses
// a request whose Host is not a loopback name: a page of another site
// whose name was made to resolve to 127.0.0.1 (DNS rebinding) reads
// nothing.
func (s *webServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !s.o.expose {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopback(host) {
				webError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not a loopback name: open the address pacer web printed (or start it with -expose)", r.Host))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// status answers GET /api/status with a frame.
func (s *webServer) status(w http.ResponseWriter, r *http.Request) {
	writeWebJSON(w, http.StatusOK, s.frame(r.Context()))
}

// frame reads the keys and the fleet, or gives the frame read less than
// half an interval ago. Reads are serialized: the slots granted per second
// are the growth between two of them.
func (s *webServer) frame(ctx context.Context) webFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && time.Since(s.lastAt) < s.o.interval/2 {
		f := *s.last
		f.Age = time.Since(s.lastAt)
		return f
	}
	fr := s.c.readFrame(ctx, "web", s.o.pattern, s.keys)
	f := webFrame{Now: fr.Now, Prefix: s.c.prefix, Pattern: cmp.Or(s.o.pattern, "*"), Redis: s.c.addr,
		Write: s.o.write, Interval: s.o.interval, Keys: []webKey{}, Fleet: fr.Fleet,
		FleetSummary: strings.TrimSuffix(fleetLine(fr.Fleet, fr.Now), "\n"), Errors: fr.Errors}
	if f.Errors == nil {
		f.Errors = []string{}
	}
	width := sparkWidth(s.o.interval)
	for _, v := range fr.Keys {
		k := webKey{keyView: v, BandTexts: []string{}, TenantTexts: []string{}, SeatTexts: []string{}, History: []webChange{}}
		k.SeatTexts = append(k.SeatTexts, seatLines(v.Seats)...)
		if k.Bands == nil {
			k.Bands = []admin.BandStatus{}
		}
		k.RateBand, k.Rate, k.Use = gauge(v.prev, v.KeyStatus)
		t := fr.trails[v.Key]
		k.Spark = sparkline(t.buckets(fr.Now, width, func(p point) float64 { return p.rate }, true), rateOf(v.Policy))
		k.QueueSpark = sparkline(t.buckets(fr.Now, width, func(p point) float64 { return p.queue.Seconds() }, false), 0)
		for _, b := range v.Bands {
			k.BandTexts = append(k.BandTexts, bandText(b, unitOf(v.Policy, b.Name)))
		}
		writeTenants(func(_, format string, args ...any) {
			k.TenantTexts = append(k.TenantTexts, fmt.Sprintf(format, args...))
		}, v.KeyStatus)
		h, err := s.c.admin.History(ctx, v.Key)
		if err != nil {
			f.Errors = append(f.Errors, oneLine(s.c.keyError("history", v.Key, err).Error()))
		}
		k.HistoryTotal = len(h)
		k.History = newWebChanges(h[:min(len(h), webHistory)])
		f.Keys = append(f.Keys, k)
	}
	if ctx.Err() == nil { // a frame cut short by a client gone is not kept
		s.last, s.lastAt = &f, time.Now()
	}
	return f
}

// invalidate makes the next frame a fresh read.
func (s *webServer) invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = nil
}

// gauge is the band a key's gauge compares it with, its rate and its use
// from prev (nil: none) to st: see webKey.
func gauge(prev *admin.KeyStatus, st admin.KeyStatus) (string, float64, *float64) {
	pick, least := -1, 0.0
	for i, b := range st.Bands {
		lim := bucketOf(st.Policy, b.Name)
		if !b.Bucket || !(b.Spare == b.Spare) || lim == nil {
			continue
		}
		if b.Name == st.Binding {
			pick = i
			break
		}
		if part := b.Spare / float64(lim.Burst); pick < 0 || part < least {
			pick, least = i, part
		}
	}
	if pick < 0 {
		name, rate := firstBucket(st.Policy)
		return name, rate, nil
	}
	b := st.Bands[pick]
	lim := *bucketOf(st.Policy, b.Name)
	if prev == nil {
		return b.Name, lim.Rate, nil
	}
	dt := st.Now.Sub(prev.Now).Seconds()
	i := slices.IndexFunc(prev.Bands, func(x admin.BandStatus) bool { return x.Name == b.Name && x.Bucket })
	was := bucketOf(prev.Policy, b.Name)
	if dt <= 0 || i < 0 || was == nil || *was != lim || !(prev.Bands[i].Balance == prev.Bands[i].Balance) ||
		prev.Bands[i].Balance > float64(lim.Burst)-dt*lim.Rate {
		return b.Name, lim.Rate, nil
	}
	// Below its burst throughout, the bucket refilled at its rate: what
	// it granted is that refill less its balance's growth.
	use := max(0, lim.Rate-(b.Balance-prev.Bands[i].Balance)/dt)
	return b.Name, lim.Rate, &use
}

// bucketOf is the limit of pol's bucket band name, nil if pol has none.
func bucketOf(pol reserve.Policy, name string) *reserve.Limit {
	for _, b := range pol {
		if b.Name == name && b.Limit != (reserve.Limit{}) {
			return &b.Limit
		}
	}
	return nil
}

// firstBucket is the first bucket band of pol, its name and rate.
func firstBucket(pol reserve.Policy) (string, float64) {
	for _, b := range pol {
		if b.Limit != (reserve.Limit{}) {
			return b.Name, b.Limit.Rate
		}
	}
	return "", 0
}

// history answers GET /api/history?key=KEY with the key's whole history,
// newest first; an unknown key is a 404, as pacer history's exit 1.
func (s *webServer) history(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		webError(w, http.StatusBadRequest, "history: missing key (GET /api/history?key=KEY)")
		return
	}
	h, err := s.c.admin.History(r.Context(), key)
	if err == nil && len(h) == 0 {
		// No history: tell an unknown key from one nobody changed.
		_, err = s.c.admin.Status(r.Context(), key)
	}
	if err != nil {
		err = s.c.keyError("history", key, err)
		webError(w, webStatus(err), err.Error())
		return
	}
	writeWebJSON(w, http.StatusOK, newWebChanges(h))
}

// A webResult is what a change did, in pacer's words.
type webResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	Note    string `json:"note,omitempty"`
}

// change makes a handler of a change (POST): refused unless -write (403)
// and the request carries the token as "Authorization: Bearer TOKEN" (401);
// its body is one JSON object of do's request, whose fields are checked
// as pacer's command line is (400). Whatever fails, nothing changed.
func (s *webServer) change(op string, do func(ctx context.Context, dec *json.Decoder) (webResult, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.o.write {
			webError(w, http.StatusForbidden, errReadOnly.Error())
			return
		}
		if !s.authorized(r) {
			s.logf(true, "refused a %s from %s: no token, or a wrong one", op, r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="pacer web"`)
			webError(w, http.StatusUnauthorized, "the token is missing or wrong: enter the token pacer web was started with (-token or "+tokenEnv+"); nothing changed")
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			webError(w, http.StatusUnsupportedMediaType, op+": want a JSON body (Content-Type: application/json); nothing changed")
			return
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		res, err := do(r.Context(), dec)
		if err != nil {
			webError(w, webStatus(err), err.Error())
			return
		}
		res.OK = true
		s.invalidate() // the next read shows the change
		s.logf(false, "%s", res.Message)
		writeWebJSON(w, http.StatusOK, res)
	}
}

// authorized says whether r carries the token, compared in constant time
// (over SHA-256 sums, so that not even its length shows).
func (s *webServer) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1
}

// decode reads one JSON object into v: an unknown field, a value of the
// wrong type or a second object is a bad request.
func decode(op string, dec *json.Decoder, v any) error {
	if err := dec.Decode(v); err != nil {
		return usagef("%s: the request's body: %v", op, err)
	}
	if dec.More() {
		return usagef("%s: the request's body: more than one JSON object", op)
	}
	return nil
}

// whoWhy is a change's who and why, checked as a command line's (a page
// has no $USER@hostname to default to).
func whoWhy(op, who, reason string) (changeFlags, error) {
	if strings.TrimSpace(who) == "" {
		return changeFlags{}, usagef("%s: who is required: your name, for the key's history", op)
	}
	cf := changeFlags{who: who, reason: reason}
	return cf, cf.check(op)
}

// setRequest is POST /api/set's body: set's flags, as typed (numbers and
// durations as text, read as set reads them); "" is a flag not given.
type setRequest struct {
	Key     string `json:"key"`
	Band    string `json:"band"`
	Rate    string `json:"rate"`
	Burst   string `json:"burst"`
	N       string `json:"n"`
	Window  string `json:"window"`
	Origin  string `json:"origin"`
	Per     string `json:"per"`
	TZ      string `json:"tz"`
	Unit    string `json:"unit"`
	Add     bool   `json:"add"`
	Replace bool   `json:"replace"`
	Shadow  bool   `json:"shadow"`
	Who     string `json:"who"`
	Reason  string `json:"reason"`
}

func (s *webServer) set(ctx context.Context, dec *json.Decoder) (webResult, error) {
	var req setRequest
	if err := decode("set", dec, &req); err != nil {
		return webResult{}, err
	}
	if err := positionals("set", []string{req.Key}, 0, "KEY"); err != nil {
		return webResult{}, err
	}
	f := setFlags{band: cmp.Or(req.Band, reserve.PermitsUnit), rate: req.Rate, burst: req.Burst, n: req.N,
		window: req.Window, origin: req.Origin, per: req.Per, tz: req.TZ, unit: req.Unit, add: req.Add, replace: req.Replace, shadow: req.Shadow}
	given := map[string]bool{"band": req.Band != "", "rate": req.Rate != "", "burst": req.Burst != "",
		"n": req.N != "", "window": req.Window != "", "origin": req.Origin != "", "per": req.Per != "", "tz": req.TZ != "", "unit": req.Unit != ""}
	pol, err := f.policy(given, nil)
	if err != nil {
		return webResult{}, err
	}
	cf, err := whoWhy("set", req.Who, req.Reason)
	if err != nil {
		return webResult{}, err
	}
	lines, note, err := s.c.setBands(ctx, req.Key, pol, f, cf)
	if err != nil {
		return webResult{}, err
	}
	return webResult{Message: strings.Join(lines, "\n"), Note: note}, nil
}

// pauseRequest is POST /api/pause's body.
type pauseRequest struct {
	Key      string `json:"key"`
	Duration string `json:"duration"` // as pause's DURATION: 90s, 10m, 1h
	Who      string `json:"who"`
	Reason   string `json:"reason"`
}

func (s *webServer) pause(ctx context.Context, dec *json.Decoder) (webResult, error) {
	var req pauseRequest
	if err := decode("pause", dec, &req); err != nil {
		return webResult{}, err
	}
	if err := positionals("pause", []string{req.Key, req.Duration}, 0, "KEY", "DURATION"); err != nil {
		return webResult{}, err
	}
	d, err := parsePause("pause", req.Duration)
	if err != nil {
		return webResult{}, err
	}
	cf, err := whoWhy("pause", req.Who, req.Reason)
	if err != nil {
		return webResult{}, err
	}
	msg, err := s.c.pauseKey(ctx, req.Key, d, cf)
	return webResult{Message: msg}, err
}

// resumeRequest is POST /api/resume's body.
type resumeRequest struct {
	Key    string `json:"key"`
	Who    string `json:"who"`
	Reason string `json:"reason"`
}

func (s *webServer) resume(ctx context.Context, dec *json.Decoder) (webResult, error) {
	var req resumeRequest
	if err := decode("resume", dec, &req); err != nil {
		return webResult{}, err
	}
	if err := positionals("resume", []string{req.Key}, 0, "KEY"); err != nil {
		return webResult{}, err
	}
	cf, err := whoWhy("resume", req.Who, req.Reason)
	if err != nil {
		return webResult{}, err
	}
	msg, err := s.c.resumeKey(ctx, req.Key, cf)
	return webResult{Message: msg}, err
}

// webStatus is the HTTP status of a change's or a read's error: 400 a bad
// request (pacer's exit 2), 404 an unknown key, 502 Redis failing, 409
// a change refused for what Redis holds (nothing changed in any case).
func webStatus(err error) int {
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return http.StatusBadRequest
	case errors.Is(err, admin.ErrUnknownKey):
		return http.StatusNotFound
	case errors.Is(err, reserve.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusBadGateway
	}
	return http.StatusConflict
}

// webError answers with {"error": msg}.
func webError(w http.ResponseWriter, code int, msg string) {
	writeWebJSON(w, code, struct {
		Error string `json:"error"`
	}{oneLine(msg)})
}

func writeWebJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
