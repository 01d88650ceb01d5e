package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// The state format a fleet writes, and how an operator switches it.
//
// A key's state (lua/core.lua's KEYS[1]) has three formats. Format 1 is
// text, the one the releases before v0.1.0 read; format 2 is shorter text,
// which v0.1.0 reads too; format 3 is binary, the smallest and cheapest,
// and this release's own. This release reads all three, and writes format
// 2 until the fleet's setting says otherwise: during a rolling upgrade from
// v0.1.0 its processes keep reading every key, and a rollback is safe.
// Once no process of an earlier release is left, the operator switches the
// fleet to format 3 (SetFormat, or `pacer format 3`); before a rollback,
// back to 2 (or to 1 for a release before v0.1.0), which also rewrites
// every key in a newer format. docs/protocol.md gives the formats and the
// rules.

// FormatStatus is the fleet's state format as Redis holds it.
type FormatStatus struct {
	// Setting is the format the fleet's Limiters are told to write: 1, 2
	// (the default, nothing set) or 3.
	Setting int `json:"setting"`
	// Members are the fleet's Limiters, with the format each writes
	// (Member.Writes: "" for a member of an earlier release).
	Members []Member `json:"members"`
	// Format1, Format2 and Format3 count the keys whose state is in each
	// format.
	Format1 int `json:"format1_keys"`
	Format2 int `json:"format2_keys"`
	Format3 int `json:"format3_keys"`
	// History lists the switches, newest first.
	History []FormatChange `json:"history"`
}

// A FormatChange is one switch of the fleet's state format.
type FormatChange struct {
	At     time.Time `json:"at"`
	Who    string    `json:"who"`
	Reason string    `json:"reason"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	// Rewritten counts the keys rewritten in the format switched to (a
	// switch to 1 or, from 3, to 2).
	Rewritten int `json:"rewritten"`
}

// ErrEarlierRelease is returned by SetFormat for a switch to a format (2
// or 3) while a member of an earlier release, which cannot read it, is in
// the fleet.
var ErrEarlierRelease = errors.New("admin: members of an earlier release are in the fleet")

// ErrMembersBehind is returned by SetFormat when some members did not
// report the format set within FormatOptions.Wait.
var ErrMembersBehind = errors.New("admin: members still write the other format")

// FormatOptions are SetFormat's.
type FormatOptions struct {
	// Who and Reason go to the switches' history (Reason is required).
	Who, Reason string
	// Force switches to 2 or 3 even with members of an earlier release in
	// the fleet (their calls on keys written in a format they do not read
	// then fail with reserve.ErrWrongType), and back without waiting for
	// every member.
	Force bool
	// Wait bounds how long a switch back (to 1, or from 3 to 2) waits for
	// every member to report that it writes the format, before it rewrites
	// the keys. Default 2m (a member that is gone stays in the fleet up to
	// its SilentHold, 1m by default).
	Wait time.Duration
	// Progress, if set, is told what the switch is doing.
	Progress func(string)
}

var rewriteScript = redis.NewScript(lua.Rewrite)

const formatHistory = 50

func (a *Client) formatHistoryKey() string { return layout.FormatKey(a.prefix) + ":history" }

// Format returns the fleet's state format: the setting, the members and the
// format each writes, and how many keys hold each format (a scan of every
// key: on a large keyspace it takes a while).
func (a *Client) Format(ctx context.Context) (FormatStatus, error) {
	var st FormatStatus
	setting, err := a.formatSetting(ctx)
	if err != nil {
		return st, adminError("format", "", err)
	}
	st.Setting = setting
	if st.Members, err = a.Fleet(ctx); err != nil {
		return st, err
	}
	keys, err := a.stateKeys(ctx)
	if err != nil {
		return st, err
	}
	for _, f := range keys {
		switch f {
		case 1:
			st.Format1++
		case 2:
			st.Format2++
		default:
			st.Format3++
		}
	}
	raw, err := a.rdb.LRange(ctx, a.formatHistoryKey(), 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, adminError("format", "", err)
	}
	for _, r := range raw {
		var c FormatChange
		if json.Unmarshal([]byte(r), &c) == nil {
			st.History = append(st.History, c)
		}
	}
	return st, nil
}

// formatSetting returns the format the fleet writes: 1 or 3 once set,
// else 2 (lua/heartbeat.lua's KEYS[7]).
func (a *Client) formatSetting(ctx context.Context) (int, error) {
	v, err := a.rdb.Get(ctx, layout.FormatKey(a.prefix)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	switch v {
	case "1":
		return 1, nil
	case "3":
		return 3, nil
	}
	return 2, nil
}

// envArg is core.lua's ARGV[2] for the operator's scripts: the whole
// share, on the server's clock, in the state format the fleet writes.
func (a *Client) envArg(ctx context.Context) (string, error) {
	f, err := a.formatSetting(ctx)
	return formatEnv(f), err
}

// formatEnv is core.lua's ARGV[2] for the whole share, writing format f.
func formatEnv(f int) string {
	if f == 3 {
		return "1"
	}
	return fmt.Sprintf("f%d 1", f)
}

// stateKeys returns every key with a state, and its format (1, 2 or 3).
// The states are read in pipelines of stateBatch GETs.
func (a *Client) stateKeys(ctx context.Context) (map[string]int, error) {
	names, err := a.Keys(ctx, "*")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for len(names) > 0 {
		batch := names[:min(len(names), stateBatch)]
		names = names[len(batch):]
		pipe := a.rdb.Pipeline()
		gets := make([]*redis.StringCmd, len(batch))
		for i, name := range batch {
			gets[i] = pipe.Get(ctx, a.redisKey(name))
		}
		_, _ = pipe.Exec(ctx) // each command's error is read below
		for i, name := range batch {
			v, err := gets[i].Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				if code, ok := layout.ErrorCode(err); ok && code == "WRONGTYPE" {
					continue // not a state: Status names such a key
				}
				return nil, adminError("format", name, err)
			}
			out[name] = layout.StateFormat(v)
		}
	}
	return out, nil
}

const stateBatch = 1000

// SetFormat switches the state format the fleet writes to format (1, 2 or
// 3).
//
// Forward (to a newer format than the setting): after every process runs a
// release that reads it. A member of an earlier release in the fleet (one
// that does not report the format it writes, or for format 3 the formats
// it reads) makes it fail with ErrEarlierRelease, unless opts.Force. The
// Limiters write the format from their next heartbeat; keys in an older
// format move when next written.
//
// Back (to an older format, before a rollback): it waits, up to opts.Wait,
// until every member reports that it writes the format (ErrMembersBehind
// if not; the setting stays and a second run goes on), then rewrites every
// key in a newer format, until a scan finds none.
func (a *Client) SetFormat(ctx context.Context, format int, opts FormatOptions) (FormatChange, error) {
	ch := FormatChange{Who: opts.Who, Reason: opts.Reason, To: format}
	if format < 1 || format > 3 {
		return ch, fmt.Errorf("admin: state format %d: want 1, 2 or 3", format)
	}
	if strings.TrimSpace(opts.Reason) == "" {
		return ch, errors.New("admin: a format switch needs a reason, for the history")
	}
	if opts.Wait == 0 {
		opts.Wait = 2 * time.Minute
	}
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf(format, args...))
		}
	}
	from, err := a.formatSetting(ctx)
	if err != nil {
		return ch, adminError("format", "", err)
	}
	ch.From = from
	members, err := a.Fleet(ctx)
	if err != nil {
		return ch, err
	}
	if format >= 2 {
		var earlier []string
		for _, m := range members {
			if m.Writes == "" || (format == 3 && m.Reads != "3") {
				earlier = append(earlier, m.ID)
			}
		}
		if len(earlier) > 0 && !opts.Force {
			return ch, fmt.Errorf("%w: %d (%s) cannot read format %d; upgrade them first, or wait until they leave the fleet (up to its SilentHold after they stop)",
				ErrEarlierRelease, len(earlier), strings.Join(earlier, ", "), format)
		}
	}
	if err := a.rdb.Set(ctx, layout.FormatKey(a.prefix), fmt.Sprint(format), 0).Err(); err != nil {
		return ch, adminError("format", "", err)
	}
	ch.At = time.Now().UTC()
	say("the fleet's setting is now format %d (was %d)", format, from)
	if format < 3 {
		if err := a.waitWriters(ctx, fmt.Sprint(format), opts, say); err != nil {
			_ = a.noteFormat(ctx, ch)
			return ch, err
		}
		n, err := a.rewriteAll(ctx, format, say)
		ch.Rewritten = n
		if err != nil {
			_ = a.noteFormat(ctx, ch)
			return ch, err
		}
	}
	return ch, a.noteFormat(ctx, ch)
}

func (a *Client) noteFormat(ctx context.Context, ch FormatChange) error {
	b, _ := json.Marshal(ch)
	// A pipeline, not MULTI: the operator's ACL (docs/security.md) has
	// LPUSH and LTRIM, not MULTI; a history one entry longer for a moment
	// harms nothing.
	pipe := a.rdb.Pipeline()
	pipe.LPush(ctx, a.formatHistoryKey(), b)
	pipe.LTrim(ctx, a.formatHistoryKey(), 0, formatHistory-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return adminError("format", "", err)
	}
	return nil
}

// waitWriters waits until every member reports that it writes format f
// (or is of a release before the setting, which writes 1).
func (a *Client) waitWriters(ctx context.Context, f string, opts FormatOptions, say func(string, ...any)) error {
	deadline := time.Now().Add(opts.Wait)
	said := -1
	for {
		members, err := a.Fleet(ctx)
		if err != nil {
			return err
		}
		var behind []string
		for _, m := range members {
			if m.Writes != f && m.Writes != "" {
				behind = append(behind, m.ID)
			}
		}
		if len(behind) == 0 {
			say("every member (%d) writes format %s", len(members), f)
			return nil
		}
		if opts.Force {
			say("not waiting for %d members that still write the other format (--force)", len(behind))
			return nil
		}
		if len(behind) != said {
			say("waiting for %d of %d members to write format %s (at their next heartbeat)", len(behind), len(members), f)
			said = len(behind)
		}
		if time.Now().After(deadline) {
			slices.Sort(behind)
			return fmt.Errorf("%w: after %v, %d (%s) still write the other format; the setting stays %s: run again once they do, or leave the fleet",
				ErrMembersBehind, opts.Wait, len(behind), strings.Join(behind, ", "), f)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rewriteAll rewrites every key in a format newer than to in format to,
// scanning again until a scan finds none (a write in flight when the
// members switched may land after a rewrite). It returns how many it
// rewrote.
func (a *Client) rewriteAll(ctx context.Context, to int, say func(string, ...any)) (int, error) {
	total := 0
	for pass := 1; ; pass++ {
		keys, err := a.stateKeys(ctx)
		if err != nil {
			return total, err
		}
		var todo []string
		for k, f := range keys {
			if f > to {
				todo = append(todo, k)
			}
		}
		if len(todo) == 0 {
			say("no key left in a format newer than %d (%d keys, %d rewritten)", to, len(keys), total)
			return total, nil
		}
		if pass > 5 {
			return total, fmt.Errorf("admin: %d keys are still written in a format newer than %d after %d passes: a member still writes it", len(todo), to, pass-1)
		}
		slices.Sort(todo)
		say("pass %d: rewriting %d of %d keys in format %d", pass, len(todo), len(keys), to)
		for i, k := range todo {
			rk := a.redisKey(k)
			err := rewriteScript.Run(ctx, a.rdb, []string{rk, rk + ":limit"}, "", formatEnv(to), "").Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				return total, adminError("format", k, err)
			}
			total++
			if (i+1)%10000 == 0 {
				say("  %d of %d", i+1, len(todo))
			}
		}
		if pass == 1 {
			// Writes sent in a newer format before the members switched
			// may still be in flight: let them land before the next scan.
			time.Sleep(time.Second)
		}
	}
}
