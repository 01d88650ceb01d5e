package prommetrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a dashboard's PromQL reads, as far as the dashboard tests check it:
// a small scanner, not a PromQL parser. It knows selectors (a metric name,
// then matchers in braces), range brackets, grouping clauses (by, without,
// on, ignoring, group_left, group_right), the functions and aggregations
// below, numbers, strings and Grafana's $variables; anything else it cannot
// place is an error, so that a dashboard cannot slip past the checks.

// A promQuery is what one expression reads.
type promQuery struct {
	selectors []selector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
	variables []string // Grafana variables ($key, ${key}, $__rate_interval)
}

type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// promFuncs are the functions and aggregations a dashboard may call.
var promFuncs = []string{
	"abs", "avg", "avg_over_time", "ceil", "clamp_max", "clamp_min", "count", "delta", "deriv",
	"floor", "histogram_quantile", "increase", "irate", "max", "max_over_time",
	"min", "min_over_time", "quantile", "rate", "round", "scalar", "sum", "sum_over_time",
	"topk", "bottomk", "vector",
}

// Keywords that are neither metric names nor functions.
var (
	promGrouping = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	promBinary   = []string{"and", "or", "unless", "bool", "offset"}
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// parsePromQL scans expr.
func parsePromQL(expr string) (promQuery, error) {
	var q promQuery
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && strings.ContainsRune(" \t\n\r", rune(s[i])) {
			i++
		}
	}
	ident := func() string {
		j := i
		for i < len(s) && isIdent(s[i]) {
			i++
		}
		return s[j:i]
	}
	// str reads a quoted string at i, quote included, and returns its value.
	str := func() (string, error) {
		quote := s[i]
		var b strings.Builder
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
				if i < len(s) {
					b.WriteByte(s[i])
				}
			case quote:
				i++
				return b.String(), nil
			default:
				b.WriteByte(s[i])
			}
		}
		return "", fmt.Errorf("%q: unterminated string", expr)
	}
	for {
		skipSpace()
		if i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '"' || c == '\'':
			v, err := str()
			if err != nil {
				return q, err
			}
			q.variables = append(q.variables, grafanaVars(v)...)
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return q, fmt.Errorf("%q: unterminated range", expr)
			}
			q.variables = append(q.variables, grafanaVars(s[i:i+j])...)
			i += j + 1
		case c == '{':
			return q, fmt.Errorf("%q: matchers at %d without a metric name", expr, i)
		case c == '$':
			j := i + 1
			for j < len(s) && (isIdent(s[j]) || s[j] == '{' || s[j] == '}') {
				j++
			}
			q.variables = append(q.variables, grafanaVars(s[i:j])...)
			i = j
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			name := ident()
			skipSpace()
			next := byte(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case slices.Contains(promGrouping, name):
				if next != '(' {
					if name == "group_left" || name == "group_right" {
						continue
					}
					return q, fmt.Errorf("%q: %s without labels", expr, name)
				}
				j := strings.IndexByte(s[i:], ')')
				if j < 0 {
					return q, fmt.Errorf("%q: unterminated %s (", expr, name)
				}
				for l := range strings.SplitSeq(s[i+1:i+j], ",") {
					if l = strings.TrimSpace(l); l != "" {
						q.grouping = append(q.grouping, l)
					}
				}
				i += j + 1
			case slices.Contains(promFuncs, name):
				// A function, or an aggregation (its by or without may come
				// first: sum by (le) (...)).
			case next == '(':
				return q, fmt.Errorf("%q: unknown function %s", expr, name)
			case slices.Contains(promBinary, name):
			default:
				sel := selector{metric: name}
				if next == '{' {
					i++
					for {
						skipSpace()
						if i < len(s) && s[i] == ',' {
							i++
							skipSpace()
						}
						if i < len(s) && s[i] == '}' {
							i++
							break
						}
						if i >= len(s) || !isIdentStart(s[i]) {
							return q, fmt.Errorf("%q: bad matcher at %d", expr, i)
						}
						m := matcher{label: ident()}
						skipSpace()
						for _, op := range []string{"=~", "!~", "!=", "="} {
							if strings.HasPrefix(s[i:], op) {
								m.op = op
								break
							}
						}
						if m.op == "" {
							return q, fmt.Errorf("%q: matcher %s without an operator", expr, m.label)
						}
						i += len(m.op)
						skipSpace()
						if i >= len(s) || s[i] != '"' && s[i] != '\'' {
							return q, fmt.Errorf("%q: matcher %s without a quoted value", expr, m.label)
						}
						v, err := str()
						if err != nil {
							return q, err
						}
						m.value = v
						q.variables = append(q.variables, grafanaVars(v)...)
						sel.matchers = append(sel.matchers, m)
					}
				}
				q.selectors = append(q.selectors, sel)
			}
		default:
			if !strings.ContainsRune("()+-*/%^,=!<>", rune(c)) {
				return q, fmt.Errorf("%q: unexpected %q at %d", expr, c, i)
			}
			i++
		}
	}
	return q, nil
}

// grafanaVars returns the names of the Grafana variables in s: $name and
// ${name} (or ${name:format}).
func grafanaVars(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			continue
		}
		j := i + 1
		braced := j < len(s) && s[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(s) && isIdent(s[k]) {
			k++
		}
		if k > j {
			out = append(out, s[j:k])
		}
		if braced {
			for k < len(s) && s[k] != '}' {
				k++
			}
		}
		i = k
	}
	return out
}

// TestParsePromQL: the scanner finds what the dashboard tests check, and
// refuses what it cannot place.
func TestParsePromQL(t *testing.T) {
	tests := []struct {
		expr string
		want promQuery
	}{
		{`sum by (band) (rate(pacer_reservations_total{key=~"$key"}[$__rate_interval]))`, promQuery{
			selectors: []selector{{"pacer_reservations_total", []matcher{{"key", "=~", "$key"}}}},
			grouping:  []string{"band"},
			variables: []string{"key", "__rate_interval"},
		}},
		{`histogram_quantile(0.99, sum by (le, op) (rate(pacer_redis_call_duration_seconds_bucket[5m])))`, promQuery{
			selectors: []selector{{"pacer_redis_call_duration_seconds_bucket", nil}},
			grouping:  []string{"le", "op"},
		}},
		{`sum(rate(a_total{mode="local", key=~"${key}"}[1m])) / sum(rate(a_total{x!="y\"z"}[1m]))`, promQuery{
			selectors: []selector{
				{"a_total", []matcher{{"mode", "=", "local"}, {"key", "=~", "${key}"}}},
				{"a_total", []matcher{{"x", "!=", `y"z`}}},
			},
			variables: []string{"key"},
		}},
		{`max(pacer_evictable) > bool 0`, promQuery{selectors: []selector{{"pacer_evictable", nil}}}},
	}
	for _, tt := range tests {
		got, err := parsePromQL(tt.expr)
		require.NoError(t, err, "parsePromQL(%q)", tt.expr)
		assert.Equal(t, tt.want, got, "parsePromQL(%q)", tt.expr)
	}
	for _, bad := range []string{
		`sum(rat(x[1m]))`,     // a misspelt function
		`sum by band (x)`,     // by without its parentheses
		`{__name__="x"}`,      // no metric name
		`x{mode}`,             // a matcher without an operator
		`x{mode="local}`,      // an unterminated string
		`x{mode=local}`,       // an unquoted value
		`x # a comment`,       // unexpected
		`rate(x[$__interval)`, // an unterminated range
	} {
		_, err := parsePromQL(bad)
		assert.Error(t, err, "parsePromQL(%q)", bad)
	}
}
