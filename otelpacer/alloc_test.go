package otelpacer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestGrantAllocs: once its attribute sets are made, a grant's metrics
// allocate only what the SDK's meter does itself: one per measurement (the
// options' slice, with SDK v1.47), here four (requests, time_in_queue, and
// two units). docs/otel.md, "Cost".
func TestGrantAllocs(t *testing.T) {
	g := newRig(t, otelpacer.Options{KeyAttribute: func(key string) string {
		h, _, _ := strings.Cut(key, "/")
		return h
	}})
	grant := reserve.Grant{Key: "a.example/x", Units: []string{"requests", "tokens"}, Amounts: []float64{1, 100},
		Wait: 20 * time.Millisecond, Source: reserve.SourceRedis, Band: "tokens"}
	g.tel.Granted(grant)
	if n := testing.AllocsPerRun(1000, func() { g.tel.Granted(grant) }); n > 4 {
		t.Errorf("Granted allocates %v times, want at most 4", n)
	}
}

// newValueAllocs returns the allocations of a grant whose key has a new
// pacer.key value, on a Telemetry that has cached the sets of cached
// values already. The MeterProvider is OpenTelemetry's noop one: the
// allocations counted are the Telemetry's own.
func newValueAllocs(t *testing.T, cached int) float64 {
	t.Helper()
	tel, err := otelpacer.New(otelpacer.Options{MeterProvider: noop.NewMeterProvider(),
		KeyAttribute: func(key string) string { return key }, MaxKeyValues: -1})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	keys := make([]string, cached+runs+1)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	grant := reserve.Grant{Source: reserve.SourceRedis}
	for _, k := range keys[:cached] {
		grant.Key = k
		tel.Granted(grant)
	}
	if got := tel.CachedSets(); got != cached {
		t.Fatalf("%d sets cached after %d values, want %d", got, cached, cached)
	}
	next := cached
	n := testing.AllocsPerRun(runs, func() {
		grant.Key = keys[next]
		next++
		tel.Granted(grant)
	})
	if got, want := tel.CachedSets(), cached+runs+1; got != want {
		t.Fatalf("%d sets cached, want %d", got, want)
	}
	return n
}

// TestNewKeyValueCost: a new pacer.key value costs the same allocations
// with 5,000 values cached as with 10: the cache takes the new set in
// O(1). (It once copied the whole cache under a lock for each new value,
// on the way from a Wait's grant to its sleep: 23 allocations with 5,000
// sets cached against 9 with 10, and the sleepers woke late.)
func TestNewKeyValueCost(t *testing.T) {
	small, large := newValueAllocs(t, 10), newValueAllocs(t, 5000)
	t.Logf("allocations of a new value's grant: %v with 10 sets cached, %v with 5,000", small, large)
	if large > small+1 {
		t.Errorf("a new value's grant allocates %v times with 5,000 sets cached, %v with 10: it grows with the cache", large, small)
	}
}

// TestKeyValuesBound (Options.MaxKeyValues): the first MaxKeyValues
// pacer.key values have series of their own, every later one counts as
// OtherKeyValue, and every measurement counts; on every instrument with
// pacer.key. By default the bound is DefaultMaxKeyValues; -1 lifts it.
// boundCases are the bounds TestKeyValuesBound and TestTenantValuesBound
// try: max, the option's value; values, how many distinct values come; own,
// how many get series of their own.
var boundCases = []struct {
	name             string
	max, values, own int
}{
	{"bound 3", 3, 10, 3},
	{"the default", 0, otelpacer.DefaultMaxKeyValues + 50, otelpacer.DefaultMaxKeyValues},
	{"no bound", -1, otelpacer.DefaultMaxKeyValues + 50, otelpacer.DefaultMaxKeyValues + 50},
}

func TestKeyValuesBound(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, otelpacer.Options{KeyAttribute: func(key string) string { return key }, MaxKeyValues: tc.max})
			for i := range tc.values {
				k := "k" + strconv.Itoa(i)
				for range i%3 + 1 {
					g.tel.Granted(reserve.Grant{Key: k, Units: []string{"tokens"}, Amounts: []float64{2}, Source: reserve.SourceRedis})
				}
				g.tel.Moved(k, "late")
				g.tel.Paused(k, time.Second)
			}
			want := map[string]int64{}
			total := int64(0)
			for i := range tc.values {
				v := "k" + strconv.Itoa(i)
				if i >= tc.own {
					v = otelpacer.OtherKeyValue
				}
				want[v] += int64(i%3 + 1)
				total += int64(i%3 + 1)
			}
			for _, name := range []string{"pacer.rate_limiting.requests", "pacer.rate_limiting.moved", "pacer.rate_limiting.pauses", "pacer.rate_limiting.units"} {
				m, ok := g.metric(t, name)
				require.True(t, ok, name)
				got := map[string]int64{}
				var sum int64
				add := func(attrs attribute.Set, n int64) {
					v, _ := attrs.Value("pacer.key")
					got[v.AsString()] += n
					sum += n
				}
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						add(dp.Attributes, dp.Value)
					}
				case metricdata.Sum[float64]:
					for _, dp := range d.DataPoints {
						add(dp.Attributes, int64(dp.Value/2))
					}
				}
				switch name {
				case "pacer.rate_limiting.requests", "pacer.rate_limiting.units":
					assert.Equal(t, want, got, name)
					assert.Equal(t, total, sum, name)
				default: // one a key
					assert.Len(t, got, min(tc.own+1, tc.values), name)
					assert.Equal(t, int64(tc.values), sum, name)
				}
			}
		})
	}
}

// TestBadOptions: New refuses a MaxKeyValues below -1, and makes nothing.
func TestBadOptions(t *testing.T) {
	for _, o := range []otelpacer.Options{{MaxKeyValues: -2}, {MaxTenantValues: -2}} {
		tel, err := otelpacer.New(o)
		require.ErrorIs(t, err, otelpacer.ErrInvalidOptions)
		assert.Nil(t, tel)
	}
}

// TestTenantValuesBound: the first MaxTenantValues pacer.tenant values get
// series of their own, later ones are recorded as OtherKeyValue, and every
// measurement still counts.
func TestTenantValuesBound(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, otelpacer.Options{TenantAttribute: func(tn string) string { return tn }, MaxTenantValues: tc.max})
			for i := range tc.values {
				g.tel.Deferred("k", "t"+strconv.Itoa(i), reserve.Normal)
			}
			m, ok := g.metric(t, "pacer.rate_limiting.fair.deferred")
			require.True(t, ok)
			got := map[string]int64{}
			var sum int64
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("pacer.tenant")
				got[v.AsString()] += dp.Value
				sum += dp.Value
			}
			want := map[string]int64{}
			for i := range tc.values {
				v := "t" + strconv.Itoa(i)
				if i >= tc.own {
					v = otelpacer.OtherKeyValue
				}
				want[v]++
			}
			assert.Equal(t, want, got)
			assert.Equal(t, int64(tc.values), sum)
		})
	}
}

// TestCacheBound: beyond MaxCachedSets the Telemetry caches no more sets,
// and every measurement still counts, under its own pacer.key.
func TestCacheBound(t *testing.T) {
	g := newRig(t, otelpacer.Options{KeyAttribute: func(key string) string { return key }})
	g.tel.SetMaxCachedSets(3)
	for i := range 10 {
		for range i + 1 {
			g.tel.Granted(reserve.Grant{Key: "k" + strconv.Itoa(i), Source: reserve.SourceRedis})
		}
	}
	if got := g.tel.CachedSets(); got != 3 {
		t.Errorf("%d sets cached, want the bound, 3", got)
	}
	m, ok := g.metric(t, "pacer.rate_limiting.requests")
	if !ok {
		t.Fatal("no requests counted")
	}
	got := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("pacer.key")
		got[v.AsString()] += dp.Value
	}
	for i := range 10 {
		if k := "k" + strconv.Itoa(i); got[k] != int64(i+1) {
			t.Errorf("requests{pacer.key=%q} = %d, want %d (all: %v)", k, got[k], i+1, got)
		}
	}
}
