package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
)

func TestAdmissions(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	state := func(at time.Duration, n int64) admin.KeyStatus {
		return admin.KeyStatus{Now: t0.Add(at), Reservations: n, HasState: true, Bands: []admin.BandStatus{{Name: "permits", Bucket: true}}}
	}
	none := func(at time.Duration) admin.KeyStatus { return admin.KeyStatus{Now: t0.Add(at)} }
	tests := []struct {
		name string
		a, b admin.KeyStatus
		want float64
		ok   bool
	}{
		{"grew", state(0, 10), state(2*time.Second, 30), 10, true},
		{"idle", state(0, 10), state(time.Second, 10), 0, true},
		{"no state in either", none(0), none(time.Second), 0, true},
		{"created between", none(0), state(time.Second, 3), 0, false},
		{"expired between", state(0, 3), none(time.Second), 0, false},
		{"expired and created again", state(0, 30), state(time.Second, 2), 0, false},
		{"no time between", state(time.Second, 1), state(time.Second, 2), 0, false},
	}
	for _, tt := range tests {
		got, ok := admissions(tt.a, tt.b)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: admissions() = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSparkline(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		values []float64
		top    float64
		want   string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7, 8}, 0, "▁▁▂▃▄▅▆▇█"},
		{[]float64{0, 4, 8}, 16, "▁▂▄"}, // on the scale of the limit
		{[]float64{0, 0}, 0, "▁▁"},
		{[]float64{nan, 1, nan}, 0, " █ "},
		{[]float64{32}, 16, "█"}, // above the limit: its own scale
	}
	for _, tt := range tests {
		if got := sparkline(tt.values, tt.top); got != tt.want {
			t.Errorf("sparkline(%v, %v) = %q, want %q", tt.values, tt.top, got, tt.want)
		}
	}
}

func TestTrailBuckets(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var tr trail
	for i := range 90 { // 90 s, one point a second: the first 30 fall out
		tr = tr.add(point{at: t0.Add(time.Duration(i) * time.Second), rate: float64(i), queue: time.Duration(i) * time.Millisecond})
	}
	if len(tr) != 61 || !tr[0].at.Equal(t0.Add(29*time.Second)) {
		t.Fatalf("the trail holds %d points from %v; want 61 from 29 s", len(tr), tr[0].at.Sub(t0))
	}
	now := t0.Add(89 * time.Second)
	width := sparkWidth(time.Second)
	if width != maxSpark {
		t.Fatalf("sparkWidth(1s) = %d, want %d", width, maxSpark)
	}
	rates := tr.buckets(now, width, func(p point) float64 { return p.rate }, true)
	queues := tr.buckets(now, width, func(p point) float64 { return p.queue.Seconds() }, false)
	// Spans of 2 s from 29 s: (29, 30), ..., the last (87, 88, 89).
	if rates[0] != 29.5 || queues[0] != 0.030 || rates[width-1] != 88 || queues[width-1] != 0.089 {
		t.Errorf("first spans %v / %v, last %v / %v; want 29.5 / 0.030, 88 / 0.089", rates[0], queues[0], rates[width-1], queues[width-1])
	}
	if got := sparkWidth(5 * time.Second); got != 12 {
		t.Errorf("sparkWidth(5s) = %d, want 12", got)
	}
	empty := trail(nil).buckets(now, 3, func(p point) float64 { return p.rate }, true)
	if !slices.ContainsFunc(empty, math.IsNaN) || sparkline(empty, 1) != "   " {
		t.Errorf("an empty trail gives %v, want blanks", empty)
	}
}

// TestParse: flags before, between and after the positional arguments,
// "--", and negative values as arguments.
func TestParse(t *testing.T) {
	tests := []struct {
		args       []string
		pos        []string
		rate, json string
	}{
		{[]string{"k", "-rate", "1", "x"}, []string{"k", "x"}, "1", "false"},
		{[]string{"-rate=2", "k", "--json"}, []string{"k"}, "2", "true"},
		{[]string{"k", "-5s", "-json"}, []string{"k", "-5s"}, "", "true"},
		{[]string{"-json", "--", "-rate", "k"}, []string{"-rate", "k"}, "", "true"},
		{[]string{"k", "-"}, []string{"k", "-"}, "", "false"},
	}
	for _, tt := range tests {
		c := &cli{stdout: io.Discard, stderr: io.Discard}
		fs := c.flagSet("set")
		rate := fs.String("rate", "", "")
		asJSON := fs.Bool("json", false, "")
		pos, err := c.parse(fs, "set", tt.args)
		if err != nil || !slices.Equal(pos, tt.pos) || *rate != tt.rate || fs.Lookup("json").Value.String() != tt.json {
			t.Errorf("parse(%q) = %q, %v, rate %q, json %v; want %q, rate %q, json %s", tt.args, pos, err, *rate, *asJSON, tt.pos, tt.rate, tt.json)
		}
	}
}

func TestHuman(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1234 * time.Nanosecond, "1µs"},
		{52_345 * time.Microsecond, "52ms"},
		{1_234 * time.Millisecond, "1.2s"},
		{-1_234 * time.Millisecond, "-1.2s"},
		{49*time.Minute + 59_900*time.Millisecond, "50m0s"},
		{2*time.Hour + 46*time.Minute + 40*time.Second, "2h47m0s"},
	}
	for _, tt := range tests {
		if got := human(tt.d).String(); got != tt.want {
			t.Errorf("human(%v) = %s, want %s", tt.d, got, tt.want)
		}
	}
}

func TestClean(t *testing.T) {
	if got, want := clean("a\x1b[2Jb\tc\nd"), `a\x1b[2Jb\tc\nd`; got != want {
		t.Errorf("clean() = %q, want %q", got, want)
	}
	if got := oneLine("a\nb  c"); got != `a\nb c` {
		t.Errorf("oneLine() = %q", got)
	}
}

func TestFit(t *testing.T) {
	text := "héllo world\nb\nc\nd\ne\n"
	if got, want := fit(text, 5, 0), "héllo\r\nb\r\nc\r\nd\r\ne\r\n"; got != want {
		t.Errorf("fit(width 5) = %q, want %q", got, want)
	}
	got := fit(text, 0, 4)
	if lines := strings.Split(strings.TrimSuffix(got, "\r\n"), "\r\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "... 3 more lines") {
		t.Errorf("fit(height 4) = %q; want 2 lines and a note of the 3 more, the last row left free", got)
	}
}

// TestWriteTenants: a key's fair tenants, each lane's next first, with
// their queues and shares, then the idle tenants with a stored weight, by
// name.
func TestWriteTenants(t *testing.T) {
	st := admin.KeyStatus{
		Tenants: []admin.TenantStatus{
			{Tenant: "live", Lane: "urgent", Waiting: true},
			{Tenant: "acme", Lane: "normal", Waiting: true, Behind: 20 * time.Millisecond, Queued: 12, Oldest: 1200 * time.Millisecond, Share: 0.4},
			{Tenant: "globex", Lane: "normal", Behind: 1500 * time.Millisecond, Share: 0.6},
			{Tenant: "hooli", Lane: "normal", Share: 0.004},
		},
		Weights: map[string]float64{"acme": 2, "zeta": 0.5, "initech": 3},
	}
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	writeTenants(line, st)
	want := `  tenants     urgent "live" waiting for its turn, 0s behind the lane's front
              normal "acme" waiting for its turn, 12 queued (the oldest for 1.2s), 40% of the lane lately, 20ms behind the lane's front, stored weight 2
              normal "globex" booked ahead, 60% of the lane lately, 1.5s behind the lane's front
              normal "hooli" not waiting, 0% of the lane lately, 0s behind the lane's front
              "initech" idle, stored weight 3
              "zeta" idle, stored weight 0.5
`
	if b.String() != want {
		t.Errorf("writeTenants:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeTenants(line, admin.KeyStatus{})
	if b.String() != "" {
		t.Errorf("writeTenants of a key with no tenants: %q, want nothing", b.String())
	}
}

// TestBindingNames: status and watch name the pause's band as every other
// surface does (names.BandPause, reserve.PauseBinding: the metrics' band,
// spans, errors, pacer web's binding), so that it reads apart from a band
// named "pause".
func TestBindingNames(t *testing.T) {
	paused := admin.KeyStatus{Binding: reserve.PauseBinding, Frees: time.Minute}
	band := admin.KeyStatus{Binding: "pause", Frees: time.Minute}
	if got := bindingShort(paused); got != names.BandPause+" 1m0s" {
		t.Errorf("bindingShort(the pause) = %q", got)
	}
	if got := bindingText(paused); !strings.HasPrefix(got, names.BandPause+" ") {
		t.Errorf("bindingText(the pause) = %q, want it to start %q", got, names.BandPause)
	}
	if bindingShort(band) == bindingShort(paused) || bindingText(band) == bindingText(paused) {
		t.Errorf("a band named pause reads as the pause: %q, %q", bindingShort(band), bindingText(band))
	}
	if !strings.Contains(legend, names.BandPause) {
		t.Errorf("watch's legend %q does not name %q", legend, names.BandPause)
	}
}

// TestGaugeBand: the gauge's band is the binding bucket, else the bucket
// closest to binding (least Spare for its burst); its use is the rate
// less the balance's growth, unknown when the bucket may have been full
// between the reads.
func TestGaugeBand(t *testing.T) {
	pol := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 10, Burst: 10}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 1000, Burst: 1000}},
	}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := func(at time.Duration, binding string, reqSpare, reqBal, tokSpare, tokBal float64) admin.KeyStatus {
		return admin.KeyStatus{Now: t0.Add(at), Policy: pol, Binding: binding, Bands: []admin.BandStatus{
			{Name: "requests", Bucket: true, Spare: reqSpare, Balance: reqBal},
			{Name: "tokens", Bucket: true, Spare: tokSpare, Balance: tokBal},
		}}
	}
	// tokens binds: its balance went from -500 to -400 in 1 s at 1000/s:
	// 900 tokens granted.
	prev, cur := st(0, "tokens", 10, -20, 1, -500), st(time.Second, "tokens", 10, -20, 1, -400)
	name, rate, use := gauge(&prev, cur)
	if name != "tokens" || rate != 1000 || use == nil || *use != 900 {
		t.Errorf("binding tokens: gauge %q %v %v; want tokens 1000 900", name, rate, use)
	}
	// Nothing binds: requests holds 2 of 10, tokens 800 of 1000: requests
	// is the closer; its balance 2 then 5 over 0.5 s at 10/s: 5 refilled,
	// 3 kept, 2 granted, 4/s.
	prev, cur = st(0, "", 2, 2, 800, 800), st(500*time.Millisecond, "", 5, 5, 900, 900)
	name, rate, use = gauge(&prev, cur)
	if name != "requests" || rate != 10 || use == nil || *use != 4 {
		t.Errorf("none binding: gauge %q %v %v; want requests 10 4", name, rate, use)
	}
	// A balance that could have reached the burst between the reads (2
	// refilling 10 in 1 s; 9.5 refilling 5 in 0.5 s): unknown.
	prev, cur = st(0, "", 2, 2, 800, 800), st(time.Second, "", 5, 5, 900, 900)
	if name, _, use = gauge(&prev, cur); name != "requests" || use != nil {
		t.Errorf("full between reads: gauge %q %v; want requests, unknown", name, use)
	}
	prev, cur = st(0, "", 9.5, 9.5, 1000, 1000), st(500*time.Millisecond, "", 9, 9, 1000, 1000)
	if name, _, use = gauge(&prev, cur); name != "requests" || use != nil {
		t.Errorf("full between reads: gauge %q %v; want requests, unknown", name, use)
	}
	// The first read: unknown.
	if name, _, use = gauge(nil, cur); name != "requests" || use != nil {
		t.Errorf("first read: gauge %q %v; want requests, unknown", name, use)
	}
}

// TestWriteSeats: a key's in-flight lines, the seats in use, N and the
// calls waiting, then the holders, the most seats first, are what
// docs/ops.md shows; watch's column sums them up; a key without seats
// has none.
func TestWriteSeats(t *testing.T) {
	s := &admin.SeatStatus{Used: 7, Waiting: 3, Stored: 8, Holders: []admin.SeatHolder{
		{Holder: "0", Limiter: "web-1", Seats: 4},
		{Holder: "2", Limiter: "web-3", Seats: 2},
		{Holder: "iweb-9", Limiter: "web-9", Seats: 1},
	}}
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	writeSeats(line, s)
	doc, err := os.ReadFile("../../docs/ops.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```\n  in flight")
	block, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/ops.md has no block of status's in flight lines")
	}
	if want := "  in flight" + block; b.String() != want {
		t.Errorf("writeSeats:\n%s\ndocs/ops.md shows:\n%s", b.String(), want)
	}
	if got, want := seatsShort(s), "7/8 +3 waiting [0:4 2:2 iweb-9:1]"; got != want {
		t.Errorf("seatsShort = %q, want %q", got, want)
	}
	if !strings.Contains(string(doc), "`"+seatsShort(s)+"`") {
		t.Errorf("docs/ops.md does not show watch's column %q", seatsShort(s))
	}
	b.Reset()
	writeSeats(line, nil)
	if b.String() != "" || seatsShort(nil) != "-" {
		t.Errorf("a key without seats: %q, %q", b.String(), seatsShort(nil))
	}
}
