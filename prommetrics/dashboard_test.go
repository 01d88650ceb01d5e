package prommetrics_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/prommetrics"
	"github.com/pacer-go/pacer/reserve"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Grafana dashboards of docs/grafana, checked against the metrics they
// read: pacer-prometheus.json against what this package registers, and
// pacer-otel.json against docs/grafana/otel-metrics.txt, the list of
// otelpacer's instruments, translated as the OpenTelemetry Prometheus
// exporter names them.

// grafanaDir holds the dashboards. It lies outside this module: the tests
// skip when the module stands alone (in the module cache).
const grafanaDir = "../docs/grafana"

func grafanaFile(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat("../go.mod"); errors.Is(err, fs.ErrNotExist) {
		t.Skip("not in the pacer repository: no ../docs/grafana")
	}
	return filepath.Join(grafanaDir, name)
}

// A series is what a dashboard may read of one Prometheus series name:
// its labels, and for some labels the values they take.
type series struct {
	labels map[string]bool
	values map[string]map[string]bool // label → values; labels absent: any value
	family string                     // the metric it belongs to (a histogram's name for its _bucket)
}

// A catalogue maps series names to what they carry.
type catalogue map[string]*series

func (c catalogue) add(name, family string, labels ...string) *series {
	s := c[name]
	if s == nil {
		s = &series{labels: map[string]bool{}, values: map[string]map[string]bool{}, family: family}
		c[name] = s
	}
	for _, l := range labels {
		s.labels[l] = true
	}
	return s
}

// exercised returns a Registry where every metric of a Metrics (with a key
// and a tenant label) has series, and the Metrics' collectors.
func exercised(t *testing.T) (*prometheus.Registry, []prometheus.Collector) {
	reg := prometheus.NewPedanticRegistry()
	rec := &recorder{Registerer: reg}
	m := prommetrics.New(rec, prommetrics.Options{
		KeyLabel:    func(k string) string { return strings.SplitN(k, "/", 2)[0] },
		TenantLabel: func(tn string) string { return tn },
	})
	permits, one := []string{reserve.PermitsUnit}, []float64{1}
	for _, g := range []reserve.Grant{
		{Key: "a/x", Source: reserve.SourceRedis},
		{Key: "a/x", Wait: time.Second, Source: reserve.SourceRedis, Band: "day"},
		{Key: "a/x", Wait: time.Minute, Source: reserve.SourceRedis, Band: reserve.PauseBinding},
		{Key: "a/x", Wait: time.Millisecond, Source: reserve.SourceLease},
		{Key: "a/x", Wait: time.Second, Source: reserve.SourceLocal, Band: "second"},
	} {
		g.Units, g.Amounts = permits, one
		m.Granted(g)
	}
	m.Reserved("b/y", permits, one, 0, false)
	for _, why := range names.Moved {
		m.Moved("a/x", why)
	}
	for _, op := range names.Ops {
		m.RedisCall(op, time.Millisecond, nil)
		m.RedisCall(op, time.Millisecond, errors.New("down"))
	}
	m.Fallback(true)
	m.Fallback(false)
	m.Paused("a/x", time.Second)
	m.Evictable("allkeys-lru")
	for _, lane := range []reserve.Lane{reserve.Urgent, reserve.Normal, reserve.Batch} {
		m.Turn("f", "acme", lane, time.Second)
		m.Deferred("f", "acme", lane)
	}
	m.SeatsTaken("a/x", "open", 1, 0, false, false)
	m.SeatsTaken("a/x", "open", 1, time.Second, true, false)
	m.SeatsTaken("a/x", "open", 1, 0, false, true)
	m.SeatsHeld("a/x", "open", 3)
	m.SeatWaiters("a/x", "open", 1)
	return reg, rec.collectors
}

// recorder records the collectors registered through it.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
	r.Registerer.MustRegister(cs...)
}

// promCatalogue is what prommetrics exports, from a Registry where every
// collector has series (checked: a metric nobody exercises here would
// escape the checks).
func promCatalogue(t *testing.T) catalogue {
	reg, collectors := exercised(t)
	for _, c := range collectors {
		ch := make(chan prometheus.Metric, 100)
		c.Collect(ch)
		close(ch)
		if len(ch) == 0 {
			descs := make(chan *prometheus.Desc, 10)
			c.Describe(descs)
			close(descs)
			d := <-descs
			t.Fatalf("%v has no series: exercise it in exercised", d)
		}
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	cat := catalogue{}
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName())
			}
			var ss []*series
			if f.GetType() == dto.MetricType_HISTOGRAM {
				ss = append(ss, cat.add(name+"_bucket", name, append(labels, "le")...),
					cat.add(name+"_sum", name, labels...), cat.add(name+"_count", name, labels...))
			} else {
				ss = append(ss, cat.add(name, name, labels...))
			}
			for _, s := range ss {
				for _, lp := range m.GetLabel() {
					if s.values[lp.GetName()] == nil {
						s.values[lp.GetName()] = map[string]bool{}
					}
					s.values[lp.GetName()][lp.GetValue()] = true
				}
			}
		}
	}
	// Keys and tenants are the user's: a dashboard may match any value.
	// Bands are the user's too, but for the band label's own values: a
	// dashboard matches no band by name.
	for _, s := range cat {
		delete(s.values, "key")
		delete(s.values, "tenant")
		delete(s.values, "le")
		if s.labels["band"] {
			s.values["band"] = map[string]bool{names.BandNone: true, names.BandPause: true}
		}
	}
	return cat
}

// setOf is a set of vs.
func setOf(vs []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// An otelInstrument is a line of otel-metrics.txt.
type otelInstrument struct {
	name, kind, unit string
	attrs            []string
}

func readOtelInstruments(t *testing.T) []otelInstrument {
	f, err := os.Open(grafanaFile(t, "otel-metrics.txt"))
	require.NoError(t, err)
	defer f.Close()
	var out []otelInstrument
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		require.Len(t, fields, 4, "otel-metrics.txt:%d: %q: want name, kind, unit, attributes", n, line)
		in := otelInstrument{name: fields[0], kind: fields[1], unit: fields[2]}
		if fields[3] != "-" {
			in.attrs = strings.Split(fields[3], ",")
		}
		out = append(out, in)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out)
	return out
}

// promName is the Prometheus name the OpenTelemetry Prometheus exporter
// (and the Collector's) gives an instrument, under the default translation
// (underscore escaping, with suffixes); the units it knows are the ones
// otel-metrics.txt uses.
func promName(in otelInstrument) (string, error) {
	name := strings.NewReplacer(".", "_", "-", "_").Replace(in.name)
	unit := in.unit
	if unit == "-" {
		unit = ""
	}
	main, per, _ := strings.Cut(unit, "/")
	if strings.ContainsAny(main, "{}") {
		main = ""
	}
	switch main {
	case "":
	case "s":
		name += "_seconds"
	default:
		return "", fmt.Errorf("%s: unit %q: teach promName its suffix", in.name, unit)
	}
	switch per {
	case "":
	case "s":
		name += "_per_second"
	default:
		return "", fmt.Errorf("%s: unit %q: teach promName its suffix", in.name, unit)
	}
	switch in.kind {
	case "counter", "histogram":
		if in.kind == "counter" {
			name += "_total"
		}
	case "updowncounter", "gauge":
		if unit == "1" && in.kind == "gauge" {
			name += "_ratio"
		}
	default:
		return "", fmt.Errorf("%s: kind %q (want counter, updowncounter, histogram or gauge)", in.name, in.kind)
	}
	return name, nil
}

// otelCatalogue is what pacer-otel.json may read: the instruments of
// otel-metrics.txt, as the exporter names them.
func otelCatalogue(t *testing.T) catalogue {
	cat := catalogue{}
	for _, in := range readOtelInstruments(t) {
		name, err := promName(in)
		require.NoError(t, err)
		var labels []string
		for _, a := range in.attrs {
			labels = append(labels, strings.ReplaceAll(a, ".", "_"))
		}
		var ss []*series
		if in.kind == "histogram" {
			ss = append(ss, cat.add(name+"_bucket", name, append(labels, "le")...),
				cat.add(name+"_sum", name, labels...), cat.add(name+"_count", name, labels...))
		} else {
			ss = append(ss, cat.add(name, name, labels...))
		}
		// The values that come from package reserve.
		for _, s := range ss {
			if s.labels["pacer_source"] {
				s.values["pacer_source"] = map[string]bool{}
				for _, src := range []reserve.Source{reserve.SourceRedis, reserve.SourceLocal, reserve.SourceLease} {
					s.values["pacer_source"][src.String()] = true
				}
			}
			if s.labels["pacer_moved_reason"] {
				s.values["pacer_moved_reason"] = setOf(names.Moved)
			}
			if s.labels["pacer_band"] {
				// Bands are the user's but for these; a refusal's band
				// may be unknown.
				s.values["pacer_band"] = map[string]bool{names.BandNone: true, names.BandPause: true, names.BandUnknown: true}
			}
			if s.labels["pacer_fallback_to"] {
				s.values["pacer_fallback_to"] = setOf(names.Modes)
			}
			if s.labels["pacer_redis_operation"] {
				s.values["pacer_redis_operation"] = setOf(names.Ops)
			}
			if s.labels["pacer_seats_got"] {
				s.values["pacer_seats_got"] = setOf(names.SeatsGot)
			}
		}
	}
	return cat
}

// TestOtelPromName: the translation gives the names issue 27 lists.
func TestOtelPromName(t *testing.T) {
	tests := []struct {
		in   otelInstrument
		want string
	}{
		{otelInstrument{name: "pacer.rate_limiting.requests", kind: "counter", unit: "{request}"}, "pacer_rate_limiting_requests_total"},
		{otelInstrument{name: "pacer.rate_limiting.request.time_in_queue", kind: "histogram", unit: "s"}, "pacer_rate_limiting_request_time_in_queue_seconds"},
		{otelInstrument{name: "pacer.rate_limiting.queued_requests", kind: "updowncounter", unit: "-"}, "pacer_rate_limiting_queued_requests"},
		{otelInstrument{name: "pacer.rate_limiting.units", kind: "counter", unit: "-"}, "pacer_rate_limiting_units_total"},
		{otelInstrument{name: "pacer.redis.evictable", kind: "gauge", unit: "-"}, "pacer_redis_evictable"},
		{otelInstrument{name: "pacer.adaptive.rate", kind: "gauge", unit: "{request}/s"}, "pacer_adaptive_rate_per_second"},
	}
	for _, tt := range tests {
		got, err := promName(tt.in)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "promName(%s, %s, %s)", tt.in.name, tt.in.kind, tt.in.unit)
	}
	_, err := promName(otelInstrument{name: "x", kind: "counter", unit: "By"})
	assert.Error(t, err, "an unknown unit")
}

// A dashboard, as far as the checks read it.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *dsRef `json:"datasource"`
	GridPos     *grid  `json:"gridPos"`
	Targets     []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grid struct{ X, Y, W, H int }

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *dsRef          `json:"datasource"`
}

// The datasource variable every panel names.
const dsVar = "DS_PROMETHEUS"

// grafanaBuiltins are the variables Grafana defines itself.
var grafanaBuiltins = []string{"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}

var labelValuesRE = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// checkDashboard checks the dashboard file name against cat: its structure,
// and every metric, label and literal value its queries read. It returns
// the series names the panels read.
func checkDashboard(t *testing.T, name string, cat catalogue) map[string]bool {
	data, err := os.ReadFile(grafanaFile(t, name))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d), "%s is not JSON", name)
	assert.NotEmpty(t, d.UID, "%s: uid", name)
	assert.NotEmpty(t, d.Title, "%s: title", name)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36, "%s: schemaVersion", name)

	// Variables: the datasource, and queries on the catalogue.
	vars := slices.Clone(grafanaBuiltins)
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		switch v.Type {
		case "datasource":
			var q string
			require.NoError(t, json.Unmarshal(v.Query, &q), "%s: variable %s: query", name, v.Name)
			assert.Equal(t, "prometheus", q, "%s: variable %s: query", name, v.Name)
		case "query":
			if assert.NotNil(t, v.Datasource, "%s: variable %s: datasource", name, v.Name) {
				assert.Equal(t, "${"+dsVar+"}", v.Datasource.UID, "%s: variable %s: datasource", name, v.Name)
			}
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				require.NoError(t, json.Unmarshal(v.Query, &q.Query), "%s: variable %s: query", name, v.Name)
			}
			m := labelValuesRE.FindStringSubmatch(q.Query)
			if assert.NotNil(t, m, "%s: variable %s: query %q: want label_values(metric, label)", name, v.Name, q.Query) {
				s := cat[m[1]]
				if assert.NotNil(t, s, "%s: variable %s: no metric %s", name, v.Name, m[1]) {
					assert.True(t, s.labels[m[2]], "%s: variable %s: %s has no label %s", name, v.Name, m[1], m[2])
				}
			}
		}
	}
	ds := slices.IndexFunc(d.Templating.List, func(v variable) bool { return v.Name == dsVar })
	require.GreaterOrEqual(t, ds, 0, "%s: no variable %s", name, dsVar)
	require.Equal(t, "datasource", d.Templating.List[ds].Type, "%s: variable %s", name, dsVar)

	require.NotEmpty(t, d.Panels, "%s: panels", name)
	ids := map[int]string{}
	var cells [][24]string // cells[y][x]: the panel there
	read := map[string]bool{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("%s: panel %d %q", name, p.ID, p.Title)
		assert.Positive(t, p.ID, "%s: id", where)
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id %d taken by %q too", where, p.ID, other)
		}
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "%s: title", where)
		assert.NotEmpty(t, p.Description, "%s: description (what the panel answers)", where)
		assert.Contains(t, []string{"timeseries", "stat"}, p.Type, "%s: type", where)
		if assert.NotNil(t, p.Datasource, "%s: datasource", where) {
			assert.Equal(t, dsRef{"prometheus", "${" + dsVar + "}"}, *p.Datasource, "%s: datasource", where)
		}
		if assert.NotNil(t, p.GridPos, "%s: gridPos", where) {
			g := *p.GridPos
			if assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.Y >= 0 && g.X+g.W <= 24, "%s: gridPos %+v", where, g) {
				overlaps := map[string]bool{}
				for y := g.Y; y < g.Y+g.H; y++ {
					for len(cells) <= y {
						cells = append(cells, [24]string{})
					}
					for x := g.X; x < g.X+g.W; x++ {
						if o := cells[y][x]; o != "" && !overlaps[o] {
							overlaps[o] = true
							t.Errorf("%s: gridPos %+v overlaps %q", where, g, o)
						}
						cells[y][x] = p.Title
					}
				}
			}
		}
		require.NotEmpty(t, p.Targets, "%s: targets", where)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.RefID, "%s: refId", where)
			assert.False(t, refs[tg.RefID], "%s: refId %s twice", where, tg.RefID)
			refs[tg.RefID] = true
			if tg.Datasource != nil {
				assert.Equal(t, *p.Datasource, *tg.Datasource, "%s: target %s: datasource", where, tg.RefID)
			}
			for _, r := range checkExpr(cat, vars, tg.Expr) {
				t.Errorf("%s: target %s: %s", where, tg.RefID, r)
			}
			q, _ := parsePromQL(tg.Expr)
			for _, s := range q.selectors {
				read[s.metric] = true
			}
		}
	}
	return read
}

// checkExpr returns what is wrong with expr against cat: metrics it does
// not hold, labels a metric lacks (in matchers, and grouping labels on any
// metric of the expression), literal values a label never takes, and
// variables that vars do not define.
func checkExpr(cat catalogue, vars []string, expr string) []string {
	if strings.TrimSpace(expr) == "" {
		return []string{"no expr"}
	}
	q, err := parsePromQL(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	if len(q.selectors) == 0 {
		bad = append(bad, fmt.Sprintf("%q reads no metric", expr))
	}
	for _, v := range q.variables {
		if !slices.Contains(vars, v) {
			bad = append(bad, fmt.Sprintf("%q: no variable $%s", expr, v))
		}
	}
	for _, sel := range q.selectors {
		s := cat[sel.metric]
		if s == nil {
			bad = append(bad, fmt.Sprintf("%q: no metric %s", expr, sel.metric))
			continue
		}
		for _, m := range sel.matchers {
			if !s.labels[m.label] {
				bad = append(bad, fmt.Sprintf("%q: %s has no label %s", expr, sel.metric, m.label))
				continue
			}
			known := s.values[m.label]
			if (m.op == "=" || m.op == "!=") && m.value != "" && !strings.Contains(m.value, "$") && known != nil && !known[m.value] {
				bad = append(bad, fmt.Sprintf("%q: %s's %s is never %q (it takes %v)", expr, sel.metric, m.label, m.value, sortedKeys(known)))
			}
		}
		for _, l := range q.grouping {
			if !s.labels[l] {
				bad = append(bad, fmt.Sprintf("%q: %s has no label %s to group by", expr, sel.metric, l))
			}
		}
	}
	return bad
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkCoverage fails for every metric of cat that no panel reads.
func checkCoverage(t *testing.T, name string, cat catalogue, read map[string]bool) {
	families := map[string]bool{}
	for n, s := range cat {
		families[s.family] = families[s.family] || read[n]
	}
	for _, f := range sortedKeys(families) {
		assert.True(t, families[f], "%s: no panel reads %s", name, f)
	}
}

// TestPrometheusDashboard: pacer-prometheus.json reads only what
// prommetrics exports, by the labels and values it has, and reads all of it.
func TestPrometheusDashboard(t *testing.T) {
	cat := promCatalogue(t)
	read := checkDashboard(t, "pacer-prometheus.json", cat)
	checkCoverage(t, "pacer-prometheus.json", cat, read)
}

// TestOtelDashboard: pacer-otel.json reads only the instruments of
// otel-metrics.txt as the exporter names them, by their attributes, and
// reads all of them.
func TestOtelDashboard(t *testing.T) {
	cat := otelCatalogue(t)
	read := checkDashboard(t, "pacer-otel.json", cat)
	checkCoverage(t, "pacer-otel.json", cat, read)
}

// TestCheckExpr: the checks catch the mistakes they are for.
func TestCheckExpr(t *testing.T) {
	cat := promCatalogue(t)
	vars := append(slices.Clone(grafanaBuiltins), "key")
	for _, tt := range []struct{ expr, want string }{
		{`sum(rate(pacer_reservation_total[5m]))`, "no metric pacer_reservation_total"},
		{`sum(rate(pacer_moved_total{key=~"$key"}[5m]))`, "pacer_moved_total has no label key"},
		{`sum by (band) (rate(pacer_units_total[5m]))`, "pacer_units_total has no label band"},
		{`sum(rate(pacer_reservations_total{source="fallback"}[5m]))`, `pacer_reservations_total's source is never "fallback"`},
		{`sum(rate(pacer_reservations_total{band="pause"}[5m]))`, `pacer_reservations_total's band is never "pause"`},
		{`sum(rate(pacer_redis_errors_total{op="adjust"}[5m]))`, `pacer_redis_errors_total's op is never "adjust"`},
		{`sum(rate(pacer_reservations_total{mode="local"}[5m]))`, `pacer_reservations_total has no label mode`},
		{`histogram_quantile(0.9, sum by (le) (rate(pacer_wait_seconds_sum[5m])))`, "pacer_wait_seconds_sum has no label le"},
		{`sum(rate(pacer_wait_seconds[5m]))`, "no metric pacer_wait_seconds"},
		{`sum(rate(pacer_reservations_total{band="day"}[5m]))`, `pacer_reservations_total's band is never "day"`},
		{`sum(rate(pacer_pauses_total{key=~"$host"}[5m]))`, "no variable $host"},
	} {
		bad := checkExpr(cat, vars, tt.expr)
		if assert.Len(t, bad, 1, "checkExpr(%q)", tt.expr) {
			assert.Contains(t, bad[0], tt.want, "checkExpr(%q)", tt.expr)
		}
	}
	assert.Empty(t, checkExpr(cat, vars, `sum by (band) (rate(pacer_wait_seconds_count{key=~"$key",band!="none",source="local"}[$__rate_interval]))`))
}

// TestNames: the values of the labels that name what pacer did are the
// ones every surface uses (package internal/names: otelpacer's attributes,
// reserve's API, pacer status and web): source, the band's own values,
// the switch's destination, the moved reason, how a call got its seats. A surface that drifts (a
// band "pause", a mode label) fails here or in names' own tests.
func TestNames(t *testing.T) {
	reg, _ := exercised(t)
	families, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]map[string]bool{} // label -> values, over every family
	labelsOf := map[string][]string{}      // family -> its labels
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName())
				if values[lp.GetName()] == nil {
					values[lp.GetName()] = map[string]bool{}
				}
				values[lp.GetName()][lp.GetValue()] = true
			}
			labelsOf[f.GetName()] = ls
		}
	}
	assert.Equal(t, setOf(names.Sources), values["source"], "source")
	assert.True(t, values["band"][names.BandPause] && values["band"][names.BandNone], "band: %v", values["band"])
	assert.False(t, values["band"]["pause"], "band: pause")
	assert.Equal(t, setOf(names.Modes), values["to"], "to")
	assert.Equal(t, setOf(names.Moved), values["why"], "why")
	assert.Equal(t, setOf(names.Ops), values["op"], "op")
	assert.Equal(t, setOf(names.SeatsGot), values["got"], "got")
	for f, ls := range labelsOf {
		assert.NotContains(t, ls, "mode", "%s: a grant's source is its source label", f)
	}
}
