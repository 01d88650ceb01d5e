package engine

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// A Request is one reservation of reserve.lua: its maximum wait (integer
// µs; -1: none) and its cost, one amount per unit.
type Request struct {
	MaxWaitUS int64
	Cost      []float64
}

// A Floor is reserve.lua's floor: what a caller's local fallback granted,
// applied before the requests.
type Floor struct {
	HorizonUS int64 // every bucket's balance is at most zero at now + HorizonUS
	Windows   []WindowUnits
}

// WindowUnits are units granted in window W of band Band.
type WindowUnits struct {
	Band  string
	W     int64
	Units float64
}

// Arg returns f as reserve.lua takes it, its windows in ascending order.
func (f Floor) Arg() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(f.HorizonUS, 10))
	ws := slices.Clone(f.Windows)
	slices.SortStableFunc(ws, func(x, y WindowUnits) int {
		if c := strings.Compare(x.Band, y.Band); c != 0 {
			return c
		}
		return int(x.W - y.W)
	})
	for _, w := range ws {
		b.WriteString(" " + w.Band + ":" + strconv.FormatInt(w.W, 10) + ":" + strconv.FormatFloat(w.Units, 'f', -1, 64))
	}
	return b.String()
}

// A Grant is reserve.lua's reply for one request: the wait in ns from now
// (when refused, the wait it would have needed), and its number: > 0
// granted, 0 refused (wait over its maximum), -1 refused (queue over 30
// years), -2 refused (a window band can never take it at the share).
type Grant struct {
	WaitNS int64
	Seq    int64
	// Band is the binding band as reserve.lua's reply names it: the
	// band's name, "~p" for the pause, "~" for nothing.
	Band string
}

// Now returns the instant g was loaded at: integer Unix µs and ns beyond.
func (g *Group) Now() (int64, int64) { return g.nowUS, g.nowNS }

// Stored returns the stored limit's text ("" if none).
func (g *Group) Stored() string { return g.stored }

// Raw returns the state as it was read ("" if none).
func (g *Group) Raw() string { return g.raw }

// Seq returns the number of the last reservation granted.
func (g *Group) Seq() int64 { return g.seq }

// Reserve is reserve.lua: floor (nil: none), then the requests, each as if
// a call of its own. wrote reports whether the state must be saved.
func (g *Group) Reserve(floor *Floor, reqs []Request) (grants []Grant, wrote bool, err error) {
	if len(g.bands) < 1 || (len(reqs) < 1 && floor == nil) {
		return nil, false, argError("want floor, m, then max_wait_us and one cost per unit for each of m requests")
	}
	if floor != nil {
		h := float64(floor.HorizonUS)
		for _, b := range g.bands {
			if b.bucket && b.z < h {
				b.z = h
			}
		}
		// The local slots were granted before any resume: one moves the
		// reservations granted during the pause to after them, not onto
		// them.
		if g.markP != nil && g.markP.e < h {
			g.markP.e = h
		}
		for _, w := range floor.Windows {
			wf := float64(w.W)
			for _, b := range g.bands {
				if b.name == w.Band && !b.bucket && wf <= b.cur+math.Floor((b.rem+h)/b.length) {
					if wf > b.w {
						b.w, b.u = wf, w.Units
					} else if wf == b.w {
						b.u += w.Units
					}
					b.rec = true
				}
			}
		}
	}
	grants = make([]Grant, len(reqs))
	granted := false
	for r, req := range reqs {
		if len(req.Cost) != len(g.unitNames) {
			return nil, false, argError("bad max_wait_us or cost")
		}
		for _, c := range req.Cost {
			if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
				return nil, false, argError("bad max_wait_us or cost")
			}
		}
		if !g.fits(req.Cost) {
			return nil, false, ErrExceeds
		}
		s, idx, exact, by, ok := g.earliest(g.pause, req.Cost)
		switch {
		case !ok:
			grants[r] = Grant{0, -2, "~"}
		case s > maxQueueUS:
			grants[r] = Grant{0, -1, by}
		case req.MaxWaitUS >= 0 && g.tell(s) > req.MaxWaitUS*1000:
			grants[r] = Grant{g.tell(s), 0, by}
		default:
			g.take(s, req.Cost, idx, exact)
			g.seq++
			granted = true
			grants[r] = Grant{g.tell(s), g.seq, by}
		}
	}
	return grants, granted || floor != nil, nil
}

// Adjust is adjust.lua's cancel (actual nil) or settle of the reservation
// numbered id (a seq, or a local id) at slot (integer Unix µs and ns) with
// cost reserved. It reports whether the state changed. The list of
// reservations already adjusted is the Store's.
func (g *Group) Adjust(id string, slotUS, slotNS int64, reserved, actual []float64) bool {
	slot := float64(slotUS-g.nowUS) + float64(slotNS)/1000 - g.nowFrac - g.resumed(id)
	passed := slot < -sameUS
	changed := false
	for _, b := range g.bands {
		c := costOf(reserved, b.unit)
		var d float64
		has := false
		if actual == nil {
			if !passed {
				d, has = -c, true
			}
		} else if b.unit >= 0 && b.unit < len(actual) {
			d, has = actual[b.unit]-c, true
		}
		if !has || d == 0 {
			continue
		}
		if !b.bucket {
			w := b.cur + math.Floor((b.rem+slot)/b.length)
			if w == b.w && w >= b.cur {
				b.u = math.Max(0, b.u+d)
				changed = true
			}
			continue
		}
		if d > 0 {
			b.z += d * b.upp
		} else {
			gap := b.e - slot
			if gap >= sameUS {
				gap += 0.001
			}
			back := c - gap*b.rate/1e6 // at the whole rate's spacing (adjust.lua)
			if back > -d {
				back = -d
			}
			if back > 0 {
				tokens := -b.z/b.upp + back
				if tokens > b.eff {
					tokens = b.eff
				}
				z := -tokens * b.upp
				if g.pause > 0 && z < g.pause {
					z = g.pause
				}
				b.z = z
				// The last reservation's cancel: see adjust.lua (its slot
				// is the last event rounded up to the ns grid).
				if off := slot - b.e; actual == nil && off > -sameUS && off < 0.001+sameUS {
					if prev := b.e - c*b.upp; prev >= -sameUS {
						b.e = math.Max(prev, 0)
					}
				}
			}
		}
		changed = true
	}
	return changed
}

// Pause is pause.lua: no slot before now + dUS; it returns the ns from now
// until the pause in force ends.
func (g *Group) Pause(dUS int64) int64 {
	d := float64(dUS)
	if d > g.pause {
		// A new pause, or a longer one over a pause during which
		// reservations were granted (see pause.lua).
		if g.pause <= 0 || (g.markP != nil && g.seq > g.markP.q) {
			last := 0.0
			for _, b := range g.bands {
				if b.bucket && b.e > last {
					last = b.e
				}
			}
			for _, x := range g.extra {
				if x.bucket && x.e > last {
					last = x.e
				}
			}
			g.markP, g.markL = &markP{q: g.seq, e: last}, nil
		}
		g.pause = d
		pa := d
		g.pauseAt = &pa
	}
	grown := 0.0
	for _, b := range g.bands {
		if b.bucket && b.z < g.pause {
			b.z = g.pause
			b.rec = true
		}
	}
	for _, x := range g.extra {
		if x.bucket && x.z < g.pause {
			if g.pause-x.z > grown {
				grown = g.pause - x.z
			}
			x.z = g.pause
		}
	}
	if grown > 0 {
		g.needAtLeast = g.expiry + grown
	}
	return ns(g.pause)
}

// Paused returns the ns from now until the pause in force ends (0: none).
func (g *Group) Paused() int64 { return ns(g.pause) }

// Resume is resume.lua: it returns the ns from now until the pause that was
// in force would have ended, and how far (ns) the reservations granted
// during it moved earlier.
func (g *Group) Resume() (was, moved int64) {
	w := g.pause
	shift := 0.0
	if w > 0 && g.markP != nil {
		shift = w - math.Max(0, g.markP.e)
		for _, b := range g.bands {
			if b.bucket || shift <= 0 {
				continue
			}
			wp := b.cur + math.Floor((b.rem+w)/b.length)
			if b.w > wp {
				shift = 0
			} else if ws := (wp-b.cur)*b.length - b.rem; w-ws < shift {
				shift = w - ws
			}
		}
		if shift < 0 {
			shift = 0
		}
	}
	dNS := ns(shift)
	if l := g.markL; l != nil && g.markP != nil {
		// Slots granted on a lattice move by whole periods, onto the
		// instants of the same ranks; on lattices of several, not at all.
		if p := l.u * l.n; p > 0 {
			dNS -= dNS % p
		} else {
			dNS = 0
		}
	}
	shift = float64(dNS) / 1000
	free := func(b *band) {
		switch {
		case shift > 0:
			b.z -= shift
			if b.e >= w-sameUS {
				b.e -= shift
			}
		case g.markP == nil || w <= 0:
			if empty := math.Max(0, b.e); b.z > empty {
				b.z = empty
			}
		}
	}
	for _, b := range g.bands {
		if b.bucket {
			free(b)
		}
	}
	for _, x := range g.extra {
		if x.bucket {
			free(x)
		}
	}
	q := g.seq
	if g.markP != nil {
		q = g.markP.q
	}
	g.markS = &[2]string{strconv.FormatInt(q, 10) + ":" + strconv.FormatInt(g.seq, 10), strconv.FormatInt(dNS, 10)}
	g.pause, g.pauseAt, g.markP, g.markL = 0, nil, nil, nil
	return ns(w), dNS
}

// BandPeek is one band as peek.lua reads it.
type BandPeek struct {
	Name   string
	Value  float64 // a bucket's balance, or a window's units in its latest window
	WaitNS int64   // this band's own wait for the cost; -1: never at the share
	EndNS  int64   // a window's latest window end, ns from now (0 for a bucket)
}

// Peek is peek.lua: the wait cost would have now (-1: never at the share),
// the pause (ns from now), and each band in force.
func (g *Group) Peek(cost []float64) (wait, pause int64, bands []BandPeek, err error) {
	if len(g.bands) < 1 {
		return 0, 0, nil, argError("need at least one band")
	}
	if !g.fits(cost) {
		return 0, 0, nil, ErrExceeds
	}
	waitOf := func(s float64, ok bool) int64 {
		if !ok {
			return -1
		}
		return g.tell(s)
	}
	s, _, _, _, ok := g.earliest(g.pause, cost)
	wait, pause = waitOf(s, ok), ns(g.pause)
	all := g.bands
	for _, b := range all {
		g.bands = []*band{b}
		s, _, _, _, ok := g.earliest(g.pause, cost)
		g.bands = all
		p := BandPeek{Name: b.name, WaitNS: waitOf(s, ok)}
		if b.bucket {
			p.Value = -b.z / b.upp
		} else {
			p.Value = b.u
			p.EndNS = ns((b.w+1-b.cur)*b.length - b.rem)
		}
		bands = append(bands, p)
	}
	return wait, pause, bands, nil
}
