package luastore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pair is a real Redis and a Store, to run the same scripts on both.
type pair struct {
	rdb    *redis.Client
	st     *Store
	prefix string // of every key of the test, on both sides
}

func newPair(t *testing.T) *pair {
	t.Helper()
	srv := redistest.New(t)
	return &pair{rdb: srv.Client, st: New(nil), prefix: redistest.Prefix(t)}
}

// keys returns names prefixed with the test's prefix (and a hash tag, as
// the project's keys have).
func (p *pair) keys(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "{" + p.prefix + "}" + n
	}
	return out
}

// eval runs src with keys and args on both sides.
func (p *pair) eval(t *testing.T, src string, keys []string, args ...any) (r, s *redis.Cmd) {
	t.Helper()
	ctx := context.Background()
	return p.rdb.Eval(ctx, src, keys, args...), p.st.Eval(ctx, src, keys, args...)
}

// same reports the difference between Redis's result and the Store's,
// "" if none: equal values, and errors of equal text (or, with firstWord,
// of the same first word: Lua runtime errors are worded by gopher-lua).
func same(r, s *redis.Cmd, firstWord bool) string {
	return sameResults(r.Val(), r.Err(), s.Val(), s.Err(), firstWord)
}

// sameResults is same for values and errors.
func sameResults(rv any, rerr error, sv any, serr error, firstWord bool) string {
	if (rerr == nil) != (serr == nil) {
		return "errors: redis " + errText(rerr) + ", store " + errText(serr)
	}
	if rerr != nil {
		if errors.Is(rerr, redis.Nil) != errors.Is(serr, redis.Nil) {
			return "errors: redis " + errText(rerr) + ", store " + errText(serr)
		}
		var re, se redis.Error
		if errors.As(rerr, &re) != errors.As(serr, &se) {
			return "error types: redis " + errText(rerr) + ", store " + errText(serr)
		}
		a, b := rerr.Error(), serr.Error()
		if ra, sa := runtimeError.FindStringSubmatch(a), runtimeError.FindStringSubmatch(b); ra != nil && sa != nil {
			// A Lua runtime error: gopher-lua words its own message;
			// the line and the script must be Redis's.
			a, b = ra[1]+ra[2], sa[1]+sa[2]
		}
		if firstWord {
			a, _, _ = strings.Cut(a, " ")
			b, _, _ = strings.Cut(b, " ")
		}
		if a != b {
			return "errors: redis " + errText(rerr) + ", store " + errText(serr)
		}
		return ""
	}
	if !reflect.DeepEqual(normal(rv), normal(sv)) {
		return "values: redis " + show(rv) + ", store " + show(sv)
	}
	return ""
}

// runtimeError matches a script's Lua runtime error as Redis and the Store
// write it: the position, gopher-lua's or Lua's message, the script.
var runtimeError = regexp.MustCompile(`^(ERR user_script:\d+:) .* (script: \w+, on @user_script:\d+\.)$`)

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return "error(" + err.Error() + ")"
}

func show(v any) string { return fmt.Sprintf("%#v", v) }

// normal returns v with every error inside an array replaced by its text
// (go-redis gives Redis's as its own type, the Store's are Errors).
func normal(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normal(e)
		}
		return out
	case redis.Error:
		return "error: " + v.Error()
	}
	return v
}
