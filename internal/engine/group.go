package engine

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// A Group is one key group loaded at an instant, as core.lua loads it: the
// policy in force (the caller's bands merged with a stored limit), each
// band's state relative to now, the pause, the records of bands not in
// force, and the reserved records. Operations (ops.go) change it; Save
// writes it back.
type Group struct {
	nowUS     int64
	nowNS     int64   // now's ns beyond the µs (0..999)
	nowFrac   float64 // nowNS in µs
	share     Share
	rateShare float64

	bands     []*band
	extra     []*band // records of bands not in force
	markP     *markP
	markL     *markL // the lattice of the slots granted during the pause ("~l")
	markS     *[2]string
	unitNames []string // the caller's cost units, in order

	raw     string // the state as read ("" if none)
	hasRaw  bool
	format1 bool
	expiry  float64
	// needAtLeast is an expiry (µs from now) the next Save sets at least
	// (core.lua's need_at_least).
	needAtLeast float64
	seq         int64
	pause       float64  // no slot before it (clamped at 0)
	pauseAt     *float64 // the stored pause, when the key was paused
	hasCfg      bool
	stored      string // the stored limit's text, "" if none
	lattice     *lattice
}

type markP struct {
	q int64
	e float64
}

// markL is core.lua's "~l u n": the slots granted during the pause in force
// lie on the lattice of spacing u ns and n ranks (0 0: on lattices of
// several).
type markL struct{ u, n int64 }

// band is one band's state, core.lua's band table.
type band struct {
	name   string
	unit   int
	bucket bool
	rec    bool
	// bucket
	rate, upp, burst, eff, fill, z, e float64
	lat                               float64 // the rate of its lattice (see lattice.go)
	// window
	n, length, rem, cur, w, u float64
	member                    int // member mode: this member's rank; -1 otherwise
}

var (
	format2Re = regexp.MustCompile(`^(\d\d+) (\d+) (\d+) (c?-?[\d.]+)((?s).*)$`)
	format1Re = regexp.MustCompile(`^(\d) (\d+) (-?\d+) (\d+) (-?[\d.]+) (\d)((?s).*)$`)
)

// Load loads a key group at now (integer Unix µs, and ns beyond it) for a
// caller of bands charging units, at share, from its state (hasState false:
// none) and its stored limit (hasStored false: none). serverTime is true
// when now is the server's clock (core.lua's ARGV[1] ""): a state written
// later than now is then read as written at now.
func Load(nowUS, nowNS int64, serverTime bool, share Share, units []string, bands []Band, state string, hasState bool, stored string, hasStored bool) (*Group, error) {
	if serverTime {
		nowNS = 0 // TIME has µs
	}
	g := &Group{nowUS: nowUS, nowNS: nowNS, nowFrac: float64(nowNS) / 1000, share: share, rateShare: 1, unitNames: units}
	if !share.Whole() {
		if share.IsMember {
			if share.Member < 0 || share.Member >= share.N || (share.Also > 1 && share.Member >= share.Also) {
				return nil, argError("bad share")
			}
			g.rateShare = 1 / float64(max(share.N, share.Also))
		} else {
			for _, k := range share.Held {
				if k < 0 || k >= share.N {
					return nil, argError("bad share")
				}
			}
			if len(share.Held) >= share.N {
				return nil, argError("bad share")
			}
			g.rateShare = float64(share.N-len(share.Held)) / float64(share.N)
		}
	}
	var err error
	g.bands, err = g.readBands(bands)
	if err != nil {
		return nil, err
	}

	base := -g.nowFrac
	var rest string
	if hasState {
		g.raw, g.hasRaw = state, true
		var t, s, p string
		if m := format2Re.FindStringSubmatch(state); m != nil {
			t, s, p, rest = m[1], m[3], m[4], m[5]
			x, _ := strconv.ParseFloat(m[2], 64)
			g.expiry = x * 1000
			if strings.HasPrefix(p, "c") {
				g.hasCfg, p = true, p[1:]
			}
		} else if m := format1Re.FindStringSubmatch(state); m != nil && m[1] == "1" {
			t, s, p, rest = m[2], m[4], m[5], m[7]
			x, _ := strconv.ParseFloat(m[3], 64)
			g.expiry = x / 1000
			g.hasCfg = m[6] == "1"
			g.format1 = true
		} else {
			return nil, fmt.Errorf("%w: %q", ErrWrongType, state)
		}
		tv, _ := strconv.ParseFloat(t, 64)
		if !(serverTime && tv > float64(nowUS)) {
			base = tv - float64(nowUS) - g.nowFrac
		}
		g.expiry += base
		g.seq, _ = strconv.ParseInt(s, 10, 64)
		if p == "0" {
			g.pause = base
		} else {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: pause %q", ErrWrongType, p)
			}
			g.pause = v/1000 + base
			if v >= 1000 || v < 0 {
				pa := g.pause
				g.pauseAt = &pa
			}
		}
	}

	if g.hasCfg || !hasState {
		g.hasCfg = false
		if hasStored {
			g.hasCfg = true
			g.stored = stored
			mode, text, _ := strings.Cut(stored, " ")
			sb, err := ParseBands(text, g.unitNames)
			if err != nil {
				return nil, err
			}
			switch mode {
			case "enforce":
				if len(g.bands) > 0 {
					bs, err := g.readBands(sb)
					if err != nil {
						return nil, fmt.Errorf("%w: %w", ErrConfig, err)
					}
					g.bands = merge(g.bands, bs)
				}
			case "shadow":
				// Counted by Redis alone (reserve.lua's KEYS[3]): the local
				// fallback enforces the caller's policy.
			default:
				return nil, fmt.Errorf("%w: unknown mode %s", ErrConfig, mode)
			}
		}
	}

	g.lattice = g.newLattice()
	if rest != "" {
		g.loadRecords(rest, base)
	}
	if g.pauseAt != nil {
		for _, b := range g.bands {
			if b.bucket && !b.rec && b.z < *g.pauseAt {
				b.z = *g.pauseAt
			}
		}
	}
	if g.pause < 0 {
		g.pause = 0
	}
	return g, nil
}

// readBands is core.lua's read_bands for bands already parsed.
func (g *Group) readBands(bands []Band) ([]*band, error) {
	out := make([]*band, 0, len(bands))
	for _, b := range bands {
		if b.Name == "" || b.Name[0] == '~' {
			return nil, argError("bad band name")
		}
		x := &band{name: b.Name, unit: b.Unit, bucket: b.Bucket, rate: b.Rate, lat: b.Rate, member: -1}
		if b.Bucket {
			if !(b.Rate > 0) || math.IsInf(b.Rate, 0) || !(b.Burst >= 1) {
				return nil, argError("bad bucket %s", b.Name)
			}
			x.upp = 1000000 / (b.Rate * g.rateShare)
			eff := b.Burst
			switch {
			case g.share.Whole():
			case g.share.IsMember:
				eff = memberBurst(b.Burst, g.share.N, g.share.Member)
				if g.share.Also > 1 {
					eff = min(eff, memberBurst(b.Burst, g.share.Also, g.share.Member))
				}
				x.member = g.share.Member
			default:
				for _, k := range g.share.Held {
					eff -= memberBurst(b.Burst, g.share.N, k)
				}
				if eff < 0 {
					eff = 0
				}
				if eff > b.Burst*g.rateShare {
					eff = b.Burst * g.rateShare
				}
			}
			x.burst, x.eff, x.fill, x.z, x.e = b.Burst, eff, eff*x.upp, -eff*x.upp, -eff*x.upp
		} else {
			if !(b.N >= 1) || b.LenUS < 1 {
				return nil, argError("bad window %s", b.Name)
			}
			length := float64(b.LenUS)
			q := float64(g.nowUS) - float64(b.OriginUS)
			cur := math.Floor(q / length)
			rem := q - cur*length
			if rem < 0 {
				cur, rem = cur-1, rem+length
			} else if rem >= length {
				cur, rem = cur+1, rem-length
			}
			x.n, x.burst, x.length, x.rem, x.cur, x.w = b.N, b.N, length, rem+g.nowFrac, cur, cur
			if g.share.IsMember {
				x.member = g.share.Member
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// merge is core.lua's merge: from's bands replace into's of the same names,
// the others are added. A bucket that replaces a bucket keeps its lattice
// rate (the caller's: see lattice.go).
func merge(into, from []*band) []*band {
	at := make(map[string]int, len(into))
	for i, b := range into {
		at[b.name] = i
	}
	for _, b := range from {
		if i, ok := at[b.name]; ok {
			if b.bucket && into[i].bucket {
				b.lat = into[i].lat
			}
			into[i] = b
		} else {
			into = append(into, b)
		}
	}
	return into
}

// loadRecords is core.lua's load_records for the state's records.
func (g *Group) loadRecords(text string, at float64) {
	f := strings.Fields(text)
	if len(f) == 2 && strings.HasPrefix(text, " ") && strings.Count(text, " ") == 2 {
		z := zeroOr(f[0])/1000 + at
		e := zeroOr(f[1])/1000 + at
		var b *band
		if len(g.bands) == 1 && g.bands[0].name == "permits" {
			b = g.bands[0]
		} else {
			for _, x := range g.bands {
				if x.name == "permits" {
					b = x
				}
			}
		}
		switch {
		case b != nil && b.bucket:
			if z > -b.fill {
				b.z = z
			}
			b.e = e
			b.rec = true
		case b == nil:
			g.extra = append(g.extra, &band{name: "permits", bucket: true, z: z, e: e})
		}
		return
	}
	for i := 0; i+3 <= len(f); i += 3 {
		name, x, y := f[i], f[i+1], f[i+2]
		var b *band
		if i/3 < len(g.bands) && g.bands[i/3].name == name {
			b = g.bands[i/3]
		} else {
			for _, c := range g.bands {
				if c.name == name {
					b = c
				}
			}
		}
		win := false
		if strings.HasPrefix(x, "w") {
			win, x = true, x[1:]
		} else {
			win = g.format1 && !strings.Contains(x, ".")
		}
		xv, _ := strconv.ParseFloat(x, 64)
		yv, _ := strconv.ParseFloat(y, 64)
		switch {
		case strings.HasPrefix(name, "~"):
			switch name {
			case "~p":
				g.markP = &markP{q: int64(xv), e: yv/1000 + at}
			case "~l":
				g.markL = &markL{int64(xv), int64(yv)}
			case "~s":
				g.markS = &[2]string{x, y}
			}
		case b != nil:
			if b.bucket && !win {
				z := xv/1000 + at
				if z > -b.fill {
					b.z = z
				}
				b.e = yv/1000 + at
				b.rec = true
			} else if !b.bucket && win {
				if xv >= b.cur {
					if (xv+1-b.cur)*b.length-b.rem <= g.expiry+1000000 {
						b.w, b.u = xv, yv
					} else if yv > 0 {
						b.u = b.n
					}
				}
				b.rec = true
			}
		case win:
			g.extra = append(g.extra, &band{name: name, w: xv, u: yv})
		default:
			g.extra = append(g.extra, &band{name: name, bucket: true, z: xv/1000 + at, e: yv/1000 + at})
		}
	}
}

// zeroOr parses a record's time, "0" being 0 (as core.lua's fast paths).
func zeroOr(s string) float64 {
	if s == "0" {
		return 0
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// memberBurst is core.lua's member_burst: B_k.
func memberBurst(b float64, n, k int) float64 {
	fn := float64(n)
	if b >= fn {
		extra := 0.0
		if float64(k) < luaMod(b, fn) {
			extra = 1
		}
		return math.Floor(b/fn) + extra
	}
	if float64(k) < b-1 {
		return 2
	}
	return 1
}

// memberN is core.lua's member_n: N_k(w).
func memberN(nn float64, n, k int, w float64) float64 {
	f := math.Floor(nn)
	fn := float64(n)
	extra := 0.0
	if luaMod(float64(k)+w, fn) < luaMod(f, fn) {
		extra = 1
	}
	return math.Floor(f/fn) + extra
}

// luaMod is Lua's a % b: a - floor(a/b)*b.
func luaMod(a, b float64) float64 { return a - math.Floor(a/b)*b }

// cap is core.lua's cap: the units window band b may hold in window w.
func (g *Group) cap(b *band, w float64) float64 {
	switch {
	case g.share.Whole():
		return b.n
	case g.share.IsMember:
		c := memberN(b.n, g.share.N, g.share.Member, w)
		if g.share.Also > 1 {
			c = min(c, memberN(b.n, g.share.Also, g.share.Member, w))
		}
		return c
	}
	c := b.n
	for _, k := range g.share.Held {
		c -= memberN(b.n, g.share.N, k, w)
	}
	return c
}
