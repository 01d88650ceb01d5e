package combo

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	iprovider "github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
)

// The provider: an HTTP API in a process of its own that enforces each
// key's true limit on the calls' arrival, answers 429 with Retry-After
// beyond it (KeyHTTP's in the seed's body variant: body.go), announces
// pauses when the runner tells it to, and records every call. It is the
// oracle's eyes: the verdict judges its records.
//
//	POST /call      a Call (JSON); the reply is a Reply, status 200 or 429
//	POST /announce  ?key=K&d=NS: the next call on K gets a 429 with
//	                Retry-After d, and the key is refused until then
//	GET  /records   every Call so far, as the provider filled them in

// Arrival tolerances: the provider judges arrivals, which come a few ms
// after the slots on a loaded machine, so it lets a bucket run this far
// ahead and a window take this many more units before it refuses. The
// verdict judges the slots, exactly.
const (
	arrivalJitter = 25 * time.Millisecond
	windowSlack   = 2
	// httpLatency is KeyHTTP's round trip.
	httpLatency = 100 * time.Millisecond
)

type provider struct {
	dialect string // KeyHTTP's counts' (dialect.go)
	body    string // KeyHTTP's refusals' body (body.go)

	mu      sync.Mutex
	keys    map[string]*providerKey
	records []Call
	// KeySeats (seats.go): its N, the seats open now, and the counter of
	// its calls' arrivals and ends.
	seatsN    int
	seatsOpen int
	seatSeq   int64
}

type providerKey struct {
	bands    []band
	tat      []float64       // bucket bands: theoretical arrival time, Unix ns
	used     map[int]float64 // window bands: units in the current window, by band
	windows  map[int]int64   // window bands: that window's index
	announce time.Duration   // a pause to announce to the next call
	paused   int64           // refused until (Unix ns)
}

// providerSpec is what the runner tells the provider.
type providerSpec struct {
	Dialect string // KeyHTTP's counts' dialect (internal/provider's)
	Body    string // KeyHTTP's refusals' body variant (body.go)
	Seats   SeatsDraw
}

func newProvider(dialect, body string) *provider {
	p := &provider{dialect: dialect, body: body, keys: map[string]*providerKey{}}
	for name, def := range keyDefs {
		p.keys[name] = newProviderKey(def.pol)
	}
	return p
}

func newProviderKey(pol reserve.Policy) *providerKey {
	pk := &providerKey{bands: bandsOf(pol), used: map[int]float64{}, windows: map[int]int64{}}
	pk.tat = make([]float64, len(pk.bands))
	return pk
}

// withSeats adds KeySeats, with d's policy.
func (p *provider) withSeats(d SeatsDraw) *provider {
	if d.N > 0 {
		p.seatsN = d.N
		p.keys[KeySeats] = newProviderKey(d.ratePolicy())
	}
	return p
}

// providerMain runs the provider until the process is killed: it prints
// "addr <host:port>" and serves.
func providerMain(spec providerSpec) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p := newProvider(spec.Dialect, spec.Body).withSeats(spec.Seats)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /call", p.handleCall)
	mux.HandleFunc("POST /announce", p.handleAnnounce)
	mux.HandleFunc("GET /records", p.handleRecords)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("addr %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

func (p *provider) handleCall(w http.ResponseWriter, r *http.Request) {
	var c Call
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if c.Key == KeySeats {
		p.seatCall(w, r, &c)
		return
	}
	if c.Kind == kindHTTP || c.Kind == kindAdaptive {
		// Sent through pacehttp: its slot lies between the call and the
		// send, which the child's transport stamps (as a Wait's), unless
		// the slot itself came with it.
		fire, _ := strconv.ParseInt(r.Header.Get(fireHeader), 10, 64)
		c.Fire, c.Hi = fire, fire+int64(reserve.MaxEarly)
		// The slot pacehttp sent it on, which the child's hook saw
		// (calls.go's sending): judged as a reservation's.
		readSlot(&c, r.Header.Get(slotHeader))
	}
	if c.Kind == kindHTTP {
		// KeyHTTP's round trip is httpLatency, half before it is
		// counted: the calls on their way when a count comes back are
		// more than the provider's slack, so only a fleet that keeps
		// count of them stays within the window.
		time.Sleep(httpLatency / 2)
		defer time.Sleep(httpLatency / 2)
	}
	rep, ok := p.call(&c)
	if !ok {
		http.Error(w, "unknown key "+strconv.Quote(c.Key), http.StatusBadRequest)
		return
	}
	p.answer(w, c.Key, rep)
}

// answer writes rep, the answer to a call on key: the counts of KeyHTTP's
// window in the seed's dialect, Retry-After on a 429, and the Reply as the
// body; or, for KeyHTTP's 429s in a body variant (body.go), the provider's
// body with the Reply in replyHeader (and in bodyGoogle no rate-limit
// header at all).
func (p *provider) answer(w http.ResponseWriter, key string, rep Reply) {
	refused := rep.Status == http.StatusTooManyRequests
	var body []byte
	ctype := "application/json"
	if httpRefused(p.body, key, rep.Status) {
		body, ctype = refusalBody(p.body, rep, p.keys[key].countedQuota())
	}
	if rep.count != nil && !(body != nil && p.body == bodyGoogle) {
		// The window's quota, what is left of it, and its end, in the
		// seed's dialect.
		iprovider.CountHeaders(w.Header(), p.dialect, int64(rep.count.n), int64(max(0, rep.count.left)), rep.count.per,
			time.Unix(0, rep.count.end), time.Unix(0, rep.Arrive), refused)
	}
	w.Header().Set("Content-Type", ctype)
	if refused && !(body != nil && p.body == bodyGoogle) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(time.Duration(rep.Retry).Seconds()))))
	}
	if body != nil {
		r, _ := json.Marshal(rep)
		w.Header().Set(replyHeader, string(r))
		w.WriteHeader(rep.Status)
		_, _ = w.Write(body)
		return
	}
	w.WriteHeader(rep.Status)
	_ = json.NewEncoder(w).Encode(rep)
}

// call judges c, arrived now, and records it. The clock is read under
// p.mu, so that calls are judged in the order they are taken in: read
// before it, a call whose goroutine lost the CPU in between was judged at
// an instant before the calls taken in meanwhile (a window of the past
// reopened and its count lost; a bucket's limit moved back).
func (p *provider) call(c *Call) (Reply, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now().UnixNano()
	pk := p.keys[c.Key]
	if pk == nil {
		return Reply{}, false
	}
	rep := Reply{Status: http.StatusOK, Arrive: now}
	actual := c.Cost[unitTokens]
	switch {
	case c.Settle && c.Key == KeyFair:
		actual = fairActual(c.ID)
	case c.Settle:
		actual = actualTokens(c.ID, actual)
	}
	cost := func(unit string) float64 {
		if unit == unitTokens && c.Key != KeyFair {
			return actual
		}
		// KeyFair's low estimator reserves a third of what its calls use:
		// the raises its settles make, which the verdict allows on the
		// slots (windows.go), would have the provider refuse it on
		// arrival, and pause the key. The provider charges that key what
		// was reserved, and reports the actual.
		return c.Cost[unit]
	}
	switch {
	case pk.announce > 0:
		rep.Status, rep.Retry, rep.Why = http.StatusTooManyRequests, int64(pk.announce), "announced"
		pk.paused, pk.announce = now+int64(pk.announce), 0
	case now < pk.paused:
		rep.Status, rep.Retry, rep.Why = http.StatusTooManyRequests, pk.paused-now, "pause"
	default:
		if wait, band := pk.admit(now, cost); wait > 0 {
			rep.Status, rep.Retry, rep.Why, c.Band = http.StatusTooManyRequests, wait, "limit", band
		}
	}
	if c.Key == KeyHTTP {
		rep.count = pk.count(now)
	}
	if rep.Status == http.StatusOK && c.Cost[unitTokens] > 0 {
		rep.Actual = actual
	}
	c.Arrive, c.Status, c.Actual, c.Retry, c.Why = rep.Arrive, rep.Status, rep.Actual, rep.Retry, rep.Why
	p.records = append(p.records, *c)
	return rep, true
}

// windowCount is what the provider reports of a key's window band.
type windowCount struct {
	n, left float64
	end     int64 // Unix ns
	per     time.Duration
}

// count returns what is left at now of pk's window band "win".
func (pk *providerKey) count(now int64) *windowCount {
	for i, b := range pk.bands {
		if b.bucket || b.name != "win" {
			continue
		}
		idx := windowIndex(now, b.length)
		used := pk.used[i]
		if pk.windows[i] != idx {
			used = 0
		}
		return &windowCount{n: b.n, left: b.n - used, end: (idx + 1) * int64(b.length), per: b.length}
	}
	return nil
}

// admit takes the call's cost at now if every band allows it (with the
// arrival tolerances), else returns how long until it would have, and the
// band that refused it (the last one, if several).
func (pk *providerKey) admit(now int64, cost func(unit string) float64) (int64, string) {
	var (
		wait  int64
		which string
	)
	for i, b := range pk.bands {
		u := cost(b.unit)
		if b.bucket {
			tat := max(pk.tat[i], float64(now)) + u/b.rate*1e9
			limit := float64(now) + b.burst/b.rate*1e9 + float64(arrivalJitter)
			if tat > limit {
				wait, which = max(wait, int64(tat-limit)+1), b.name
			}
			continue
		}
		idx := windowIndex(now, b.length)
		used := pk.used[i]
		if pk.windows[i] != idx {
			used = 0
		}
		if used+u > b.n+windowSlack {
			wait, which = max(wait, (idx+1)*int64(b.length)-now), b.name
		}
	}
	if wait > 0 {
		return wait, which
	}
	for i, b := range pk.bands {
		u := cost(b.unit)
		if b.bucket {
			pk.tat[i] = max(pk.tat[i], float64(now)) + u/b.rate*1e9
			continue
		}
		idx := windowIndex(now, b.length)
		if pk.windows[i] != idx {
			pk.windows[i], pk.used[i] = idx, 0
		}
		pk.used[i] += u
	}
	return 0, ""
}

// actualTokens is what a call estimated at est used, drawn from its ID (the
// provider's own draw, the same on a replay): mostly less than the
// estimate, sometimes up to 30% more, never over the band's burst.
func actualTokens(id string, est float64) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	x := float64(h.Sum64()%10000) / 10000
	var f float64
	if x < 0.7 {
		f = 0.5 + x/0.7*0.5 // [0.5, 1)
	} else {
		f = 1 + (x-0.7)/0.3*0.3 // [1, 1.3)
	}
	return math.Min(math.Round(est*f), float64(policyLimit[2].Limit.Burst))
}

func (p *provider) handleAnnounce(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	d, err := strconv.ParseInt(r.URL.Query().Get("d"), 10, 64)
	p.mu.Lock()
	pk := p.keys[key]
	if pk != nil && err == nil && d > 0 {
		pk.announce = time.Duration(d)
	}
	p.mu.Unlock()
	if pk == nil || err != nil || d <= 0 {
		http.Error(w, "want ?key=<known key>&d=<ns>", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *provider) handleRecords(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	recs := append([]Call(nil), p.records...)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(recs)
}

// seatCall serves a call on KeySeats: it is open from its arrival until
// the provider has written its response, after c.Hold, or until its
// caller's connection closes (a process killed mid-call: what a real
// provider sees). A call that would make more than N seats open is refused
// at once (429, Why "seats"): the fleet let it through over its in-flight
// band. The rate band beside it, if any, is enforced on arrival as every
// key's is.
func (p *provider) seatCall(w http.ResponseWriter, r *http.Request, c *Call) {
	// The whole body read: the server then watches the connection, and
	// ends r's context when the caller goes.
	_, _ = io.Copy(io.Discard, r.Body)
	seats := int(c.Cost[unitRequests])
	p.mu.Lock()
	now := time.Now().UnixNano() // under p.mu (see call)
	pk := p.keys[KeySeats]
	if pk == nil {
		p.mu.Unlock()
		http.Error(w, "unknown key "+strconv.Quote(c.Key), http.StatusBadRequest)
		return
	}
	p.seatSeq++
	c.ASeq = p.seatSeq
	rep := Reply{Status: http.StatusOK, Arrive: now}
	if p.seatsOpen+seats > p.seatsN {
		rep.Status, rep.Retry, rep.Why = http.StatusTooManyRequests, int64(time.Millisecond), "seats"
		c.Open = p.seatsOpen + seats
	} else if wait, band := pk.admit(now, func(string) float64 { return float64(seats) }); wait > 0 {
		rep.Status, rep.Retry, rep.Why, c.Band = http.StatusTooManyRequests, wait, "limit", band
	} else {
		p.seatsOpen += seats
		c.Open = p.seatsOpen
	}
	c.Arrive, c.Status, c.Retry, c.Why = rep.Arrive, rep.Status, rep.Retry, rep.Why
	idx := len(p.records)
	p.records = append(p.records, *c)
	p.mu.Unlock()
	if rep.Status == http.StatusOK {
		t := time.NewTimer(time.Duration(c.Hold))
		gone := false
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			gone = true
		}
		// Ended before its response can reach the caller: the caller's
		// Done comes after it.
		p.mu.Lock()
		p.seatsOpen -= seats
		p.seatSeq++
		rec := &p.records[idx]
		rec.End, rec.ESeq, rec.Gone = time.Now().UnixNano(), p.seatSeq, gone
		p.mu.Unlock()
		if gone {
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	_ = json.NewEncoder(w).Encode(rep)
}
