package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// ErrUnknownBand is returned by Client.SetBands for a band the key does
// not have (a typo, most likely) when SetOptions.Add is not set.
var ErrUnknownBand = errors.New("admin: unknown band")

// ErrOtherMode is returned by Client.SetBands when the stored limit is in
// the other mode (enforced or shadow) and holds bands the change does not
// name: a stored limit has one mode, so the change would switch those too.
var ErrOtherMode = errors.New("admin: the stored limit is in the other mode")

// SetOptions say how Client.SetBands stores bands.
type SetOptions struct {
	// Shadow stores the limit in shadow mode: counted, not enforced (see
	// Client). Default: enforced.
	Shadow bool
	// Add allows a band the key does not have: a name in neither the
	// policy its Limiters report, its stored limit nor its state. Without
	// it such a band is refused with ErrUnknownBand. (A key with none of
	// the three, which no Limiter has used yet, takes any band.)
	Add bool
	// Replace makes the bands given the key's whole stored limit: the
	// stored bands they do not name are removed, and the code's bands of
	// those names are in force again. Default: they are kept.
	Replace bool
}

// SetBands stores the bands of pol in key's stored limit, each in place of
// the stored band of its name, or added to it; the stored limit's other
// bands are kept (unless opts.Replace). The result is enforced by every
// Limiter of the fleet from its next reservation, or with opts.Shadow only
// counted. who and reason go to the key's history.
//
// An enforced stored limit replaces the bands of the same names in the
// policy the fleet's code passes, and adds its others; the code's other
// bands stay in force. So storing only the bands to change is exactly
// right: nothing is copied from the code's policy, and its other bands
// keep following the code when a deploy changes them.
//
// A band of pol with no Unit charges the unit of the band of its name it
// replaces (the stored limit's, else the code's as a Limiter reports it),
// else its Name. A window band with a zero Window.Origin takes the origin
// of the window band of its name it replaces (give time.Unix(0, 0) for
// windows aligned on the epoch: whole UTC minutes, hours and days).
//
// Refused, with nothing written: a band the key does not have, unless
// opts.Add (ErrUnknownBand); a band on a unit the code the fleet's
// Limiters report does not charge, which would limit nothing
// (reserve.ErrInvalidPolicy); a change of mode that would switch stored
// bands pol does not name (ErrOtherMode; opts.Replace allows it); a policy
// that is not valid, alone or merged. The stored limit is read, then
// written only if it is still what was read (a compare-and-set, tried
// three times).
func (a *Client) SetBands(ctx context.Context, key string, pol reserve.Policy, opts SetOptions, who, reason string) (Change, error) {
	if err := checkKey(key); err != nil {
		return Change{}, err
	}
	if err := pol.Validate(); err != nil {
		return Change{}, err
	}
	for range 3 {
		cur, err := a.readBands(ctx, key)
		if err != nil {
			return Change{}, err
		}
		value, err := cur.apply(key, pol, opts)
		if err != nil {
			return Change{}, err
		}
		ch, err := a.run(ctx, key, "set", value, who, reason, "", "="+cur.raw)
		if errors.Is(err, errChanged) {
			continue // changed since it was read: read it again
		}
		return ch, err
	}
	return Change{}, fmt.Errorf("admin: set %q: the stored limit kept changing while this change was made: nothing changed", key)
}

// bandsOf is what Redis holds of a key's bands.
type bandsOf struct {
	raw    string         // the stored limit as stored ("<mode> <text>"), "" for none
	stored reserve.Policy // its bands
	shadow bool
	code   reserve.Policy // the policy a Limiter reports for the key, nil if none
	state  []string       // the names of the bands recorded in its state
}

// readBands reads key's stored limit, reported policy and state.
func (a *Client) readBands(ctx context.Context, key string) (bandsOf, error) {
	k := a.redisKey(key)
	pipe := a.rdb.Pipeline()
	state := pipe.Get(ctx, k)
	stored := pipe.Get(ctx, k+":limit")
	reported := pipe.HGet(ctx, a.policiesKey(), key)
	_, _ = pipe.Exec(ctx)
	var out bandsOf
	get := func(c *redis.StringCmd) (string, error) {
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		if err != nil {
			return "", adminError("set", key, err)
		}
		return v, nil
	}
	text, err := get(state)
	if err != nil {
		return out, err
	}
	if text != "" {
		ks, err := layout.ParseState(text)
		if err != nil {
			return out, fmt.Errorf("admin: set %q: %w: %w", key, reserve.ErrWrongType, err)
		}
		for _, r := range ks.Records {
			if !strings.HasPrefix(r.Name, "~") {
				out.state = append(out.state, r.Name)
			}
		}
	}
	if out.raw, err = get(stored); err != nil {
		return out, err
	}
	if out.raw != "" {
		if out.stored, out.shadow, err = parseStored(out.raw); err != nil {
			return out, fmt.Errorf("admin: set %q: %w (unset it first)", key, err)
		}
	}
	rep, err := get(reported)
	if err != nil {
		return out, err
	}
	if _, text, ok := strings.Cut(rep, " "); ok {
		var pol reserve.Policy
		if pol.UnmarshalText([]byte(text)) == nil && len(pol) > 0 {
			out.code = pol
		}
	}
	return out, nil
}

// names are the names of the key's bands, sorted, once each.
func (b bandsOf) names() []string {
	var out []string
	for _, band := range slices.Concat(b.code, b.stored) {
		out = append(out, band.Name)
	}
	out = append(out, b.state...)
	slices.Sort(out)
	return slices.Compact(out)
}

// band returns the band named name of the stored limit, else of the code's
// policy; nil if neither has one.
func (b bandsOf) band(name string) *reserve.Band {
	for _, pol := range []reserve.Policy{b.stored, b.code} {
		if i := slices.IndexFunc(pol, func(x reserve.Band) bool { return x.Name == name }); i >= 0 {
			return &pol[i]
		}
	}
	return nil
}

// apply returns the stored limit (as stored) that setting pol's bands on
// b gives, checked.
func (b bandsOf) apply(key string, pol reserve.Policy, opts SetOptions) (string, error) {
	known := b.names()
	bands := slices.Clone(pol)
	for i := range bands {
		nb := &bands[i]
		prev := b.band(nb.Name)
		if len(known) > 0 && !slices.Contains(known, nb.Name) && !opts.Add {
			return "", fmt.Errorf("%w %q on key %q (its bands: %s)", ErrUnknownBand, nb.Name, key, strings.Join(known, ", "))
		}
		if prev != nil {
			if nb.Unit == "" {
				nb.Unit = cmp.Or(prev.Unit, prev.Name)
			}
			if nb.Window != (reserve.Window{}) && nb.Window.Calendar == 0 && nb.Window.Origin.IsZero() && prev.Window != (reserve.Window{}) && prev.Window.Calendar == 0 {
				nb.Window.Origin = prev.Window.Origin
			}
		}
		if u := cmp.Or(nb.Unit, nb.Name); len(b.code) > 0 && !slices.Contains(units(b.code), u) {
			return "", fmt.Errorf("%w: band %q charges %s, which the fleet's code does not charge on %q (it charges %s): it would limit nothing",
				reserve.ErrInvalidPolicy, nb.Name, u, key, strings.Join(units(b.code), ", "))
		}
	}
	next := bands
	if !opts.Replace && len(b.stored) > 0 {
		if b.shadow != opts.Shadow {
			var others []string
			for _, s := range b.stored {
				if !slices.ContainsFunc(bands, func(x reserve.Band) bool { return x.Name == s.Name }) {
					others = append(others, s.Name)
				}
			}
			if len(others) > 0 {
				return "", fmt.Errorf("%w: key %q's stored limit is %s and holds %s, which this change does not name: storing it %s would switch them too",
					ErrOtherMode, key, modeName(b.shadow), strings.Join(others, ", "), modeName(opts.Shadow))
			}
		}
		next = mergePolicy(b.stored, bands)
	}
	text, err := next.MarshalText()
	if err != nil {
		return "", err
	}
	// Every Limiter reads the limit back: store only what reads back.
	var back reserve.Policy
	if err := back.UnmarshalText(text); err != nil {
		return "", err
	}
	return modeWord(opts.Shadow) + " " + string(text), nil
}

// mergePolicy is the policy in force when the bands of over are stored
// over base (core.lua's merge): each replaces base's band of its name, in
// its place, or is added after them.
func mergePolicy(base, over reserve.Policy) reserve.Policy {
	out := slices.Clone(base)
	for _, b := range over {
		if i := slices.IndexFunc(out, func(x reserve.Band) bool { return x.Name == b.Name }); i >= 0 {
			out[i] = b
		} else {
			out = append(out, b)
		}
	}
	return out
}

// modeWord is a stored limit's mode as stored.
func modeWord(shadow bool) string {
	if shadow {
		return "shadow"
	}
	return "enforce"
}

// modeName is a stored limit's mode in words.
func modeName(shadow bool) string {
	if shadow {
		return "in shadow mode"
	}
	return "enforced"
}
