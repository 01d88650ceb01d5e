package engine

import (
	"math"
	"strconv"
	"strings"
)

// grid is core.lua's grid: s (µs relative to now) rounded up to a whole ns.
func (g *Group) grid(s float64) float64 {
	x := (s + g.nowFrac) * 1000
	return math.Ceil(x-1e-3-math.Abs(x)*4e-16)/1000 - g.nowFrac
}

// tell is core.lua's tell: a slot on the grid as integer ns from now.
func (g *Group) tell(q float64) int64 {
	return int64(math.Floor((q+g.nowFrac)*1000+0.5) - float64(g.nowNS))
}

// ns is core.lua's ns.
func ns(s float64) int64 {
	if s < 0 {
		return -int64(math.Floor(-s*1000 + 1e-6))
	}
	return int64(math.Ceil(s*1000 - 1e-6))
}

// earliest is core.lua's earliest: by is the binding band, as reserve.lua
// names it (the band's name, "~p" for the pause, "~" for nothing). ok is
// false when a window band can never take the cost at the share.
func (g *Group) earliest(s float64, cost []float64) (q float64, idx []float64, exact float64, by string, ok bool) {
	q = g.grid(s)
	by = "~"
	if s > 0 && s == g.pause {
		by = "~p"
	}
	for range 8 {
		moved := false
		for i, b := range g.bands {
			c := costOf(cost, b.unit)
			if c <= 0 {
				continue
			}
			if b.bucket {
				// Moved only when the grid moves: t may lie a hair above its
				// own ns (float noise), which grid(t) does not pass.
				if t := b.z + c*b.upp; g.grid(t) > q {
					s, q, moved = t, g.grid(t), true
					by = b.name
					if g.pause > 0 && b.z <= g.pause {
						by = "~p"
					}
				}
				continue
			}
			w := b.cur + math.Floor((b.rem+q)/b.length)
			if w < b.w {
				w = b.w
			}
			tries := 0
			for {
				used := 0.0
				if w == b.w {
					used = b.u
				}
				if !(used+c > g.cap(b, w)*(1+1e-9)) {
					break
				}
				w++
				tries++
				if tries > g.roomPeriod() {
					return 0, nil, 0, "~", false
				}
			}
			if ws := (w-b.cur)*b.length - b.rem; g.grid(ws) > q {
				s, q, moved = ws, g.grid(ws), true
				by = b.name
			}
			if idx == nil {
				idx = make([]float64, len(g.bands))
			}
			idx[i] = w
		}
		if !moved && g.lattice != nil && costOf(cost, g.lattice.band.unit) > 0 {
			if t := g.snap(q); g.grid(t) > q {
				s, q, moved = t, g.grid(t), true
				by = g.lattice.band.name
			} else {
				s = q // charged at the slot itself
			}
		}
		if !moved {
			break
		}
	}
	return q, idx, s, by, true
}

func costOf(cost []float64, unit int) float64 {
	if unit < 0 || unit >= len(cost) {
		return 0
	}
	return cost[unit]
}

// take is core.lua's take.
func (g *Group) take(q float64, cost []float64, idx []float64, s float64) {
	if l := g.lattice; l != nil && g.markP != nil && g.pause > 0 && costOf(cost, l.band.unit) > 0 {
		m := markL{l.u, l.period / l.u}
		if g.markL == nil {
			g.markL = &m
		} else if *g.markL != m {
			g.markL = &markL{}
		}
	}
	for i, b := range g.bands {
		c := costOf(cost, b.unit)
		if c <= 0 {
			continue
		}
		if b.bucket {
			f := b.fill
			if f < c*b.upp {
				f = c * b.upp
			}
			z := b.z
			if z < s-f {
				z = s - f
			}
			b.z = z + c*b.upp
			if q > b.e {
				b.e = q
			}
		} else {
			if idx[i] > b.w {
				b.w, b.u = idx[i], 0
			}
			b.u += c
		}
		b.rec = true
	}
}

// resumed is core.lua's resumed: how much earlier (µs) a resume moved
// reservation number q.
func (g *Group) resumed(q string) float64 {
	if g.markS == nil {
		return 0
	}
	a, b, ok := strings.Cut(g.markS[0], ":")
	qv, err := strconv.ParseInt(q, 10, 64)
	av, err1 := strconv.ParseInt(a, 10, 64)
	bv, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err != nil || err1 != nil || err2 != nil || qv <= av || qv > bv {
		return 0
	}
	d, _ := strconv.ParseFloat(g.markS[1], 64)
	return d / 1000
}

// numfmt is core.lua's numfmt: a whole ns without decimals, else to a
// thousandth of a ns.
func numfmt(v float64) string {
	r := math.Floor(v + 0.5)
	if v-r < 0.0005 && r-v < 0.0005 {
		return strconv.FormatInt(int64(r), 10)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func whole(v float64) bool {
	r := math.Floor(v + 0.5)
	return v-r < 0.0005 && r-v < 0.0005
}

// g17 is Lua's string.format('%.17g', v).
func g17(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }

// An Expiry is how a save sets the key's time to live: KEEPTTL, or PX MS.
type Expiry struct {
	Keep bool
	MS   int64
}

// Save is core.lua's save: the state to write and its expiry.
func (g *Group) Save() (string, Expiry) {
	need := g.pause
	var text strings.Builder
	limit := len(g.bands) == 1 && g.bands[0].bucket && g.bands[0].name == "permits" && len(g.extra) == 0 && g.markP == nil && g.markS == nil
	var zv, ev float64
	if limit {
		b := g.bands[0]
		zv, ev = (b.z+g.nowFrac)*1000, (b.e+g.nowFrac)*1000
		if b.z+b.fill > need {
			need = b.z + b.fill
		}
	} else {
		for _, b := range g.bands {
			if b.bucket {
				g.bucketText(&text, b)
				if b.z+b.fill > need {
					need = b.z + b.fill
				}
			} else {
				windowText(&text, b)
				if over := (b.w+1-b.cur)*b.length - b.rem; b.u > 0 && over > need {
					need = over
				}
			}
		}
		for _, x := range g.extra {
			if x.bucket {
				g.bucketText(&text, x)
			} else {
				windowText(&text, x)
			}
		}
		if g.markP != nil {
			text.WriteString(" ~p ")
			text.WriteString(strconv.FormatInt(g.markP.q, 10))
			text.WriteByte(' ')
			text.WriteString(numfmt((g.markP.e + g.nowFrac) * 1000))
			if g.markL != nil {
				text.WriteString(" ~l " + strconv.FormatInt(g.markL.u, 10) + " " + strconv.FormatInt(g.markL.n, 10))
			}
		}
		if g.markS != nil {
			text.WriteString(" ~s " + g.markS[0] + " " + g.markS[1])
		}
	}
	need += 1000000
	if g.needAtLeast > need {
		need = g.needAtLeast
	}
	pv, pWhole := 0.0, true
	switch {
	case g.pause > 0:
		pv = (g.pause + g.nowFrac) * 1000
		pWhole = whole(pv)
	case g.pauseAt != nil:
		pv = (*g.pauseAt + g.nowFrac) * 1000
		pWhole = whole(pv)
	}
	keep := g.expiry >= need
	var x int64
	if keep {
		x = int64(math.Floor((g.expiry + g.nowFrac) / 1000))
	} else {
		g.expiry = need + 1000000
		x = int64(math.Ceil(g.expiry / 1000))
	}
	var v strings.Builder
	v.WriteString(strconv.FormatInt(g.nowUS, 10))
	v.WriteByte(' ')
	v.WriteString(strconv.FormatInt(x, 10))
	v.WriteByte(' ')
	v.WriteString(strconv.FormatInt(g.seq, 10))
	v.WriteByte(' ')
	if g.hasCfg {
		v.WriteByte('c')
	}
	if pWhole {
		v.WriteString(strconv.FormatInt(int64(math.Floor(pv+0.5)), 10))
	} else {
		v.WriteString(strconv.FormatFloat(pv, 'f', 3, 64))
	}
	if limit {
		v.WriteByte(' ')
		v.WriteString(numfmt(zv))
		v.WriteByte(' ')
		v.WriteString(numfmt(ev))
	}
	v.WriteString(text.String())
	if keep {
		return v.String(), Expiry{Keep: true}
	}
	return v.String(), Expiry{MS: x}
}

func (g *Group) bucketText(w *strings.Builder, b *band) {
	w.WriteByte(' ')
	w.WriteString(b.name)
	w.WriteByte(' ')
	w.WriteString(numfmt((b.z + g.nowFrac) * 1000))
	w.WriteByte(' ')
	w.WriteString(numfmt((b.e + g.nowFrac) * 1000))
}

func windowText(w *strings.Builder, b *band) {
	w.WriteByte(' ')
	w.WriteString(b.name)
	w.WriteString(" w")
	w.WriteString(strconv.FormatInt(int64(b.w), 10))
	w.WriteByte(' ')
	w.WriteString(g17(b.u))
}

// fits is core.lua's fits.
func (g *Group) fits(cost []float64) bool {
	for _, b := range g.bands {
		if costOf(cost, b.unit) > b.burst+1e-9 {
			return false
		}
	}
	return true
}

// roomPeriod is core.lua's room_period.
func (g *Group) roomPeriod() int {
	n := max(g.share.N, 1)
	if g.share.IsMember && g.share.Also > 1 {
		return n * g.share.Also / int(gcd(int64(n), int64(g.share.Also)))
	}
	return n
}
