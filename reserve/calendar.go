package reserve

import (
	"fmt"
	"github.com/pacer-go/pacer/internal/layout"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Calendar windows (Window.Calendar). The pacing rule stays the scripts'
// (core.lua): this file only reads the tz database, which Redis's Lua has
// not, and gives each call the zone's period boundaries around now, as
// core.lua's ARGV[3] "c" tables: "<spec>=<i0>:<b0>:<len>*<count>,...", the
// window numbered i0 (the period's ordinal) starting at Unix µs b0, then
// runs of count periods of len µs. docs/protocol.md describes them.

// A calendar is a calendar window's period and zone.
type calendar struct {
	period Period
	loc    *time.Location
	spec   string // "<period>:<zone>", the band's record and its table's name
}

// Calendar tables reach calBefore periods before the caller's now (a Redis
// clock seconds behind lies well inside) and this far after: a queue a
// year deep still has its windows.
const calBefore = 2

func (p Period) ahead() int {
	switch p {
	case Day:
		return 400
	case Week:
		return 60
	}
	return 14
}

// nominal is the period's usual length: Go's figures that need a length
// (a fair request's part of its lane's turns) take it.
func (p Period) nominal() time.Duration {
	switch p {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	}
	return 30 * 24 * time.Hour
}

// validZone reports whether a zone name can go in a band's record: a tz
// database name's characters.
func validZone(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '/' || r == '_' || r == '-' || r == '+') {
			return false
		}
	}
	return true
}

// calendarOf checks w's calendar fields (errors match ErrInvalidWindow).
func calendarOf(w Window) (*calendar, error) {
	if w.Calendar == 0 {
		return nil, fmt.Errorf("%w: a Location without a Calendar period (want Day, Week or Month, or no Location)", ErrInvalidWindow)
	}
	if w.Calendar < Day || w.Calendar > Month {
		return nil, fmt.Errorf("%w: Calendar %d (want Day, Week or Month)", ErrInvalidWindow, int(w.Calendar))
	}
	if w.Length != 0 || !w.Origin.IsZero() {
		return nil, fmt.Errorf("%w: a calendar window has no Length or Origin (its periods are the zone's)", ErrInvalidWindow)
	}
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	name := loc.String()
	if loc == time.Local || name == "Local" {
		return nil, fmt.Errorf("%w: Location time.Local has no name other processes can load (use time.LoadLocation)", ErrInvalidWindow)
	}
	if !validZone(name) {
		return nil, fmt.Errorf("%w: Location %q (want a tz database name)", ErrInvalidWindow, name)
	}
	return &calendar{period: w.Calendar, loc: loc, spec: w.Calendar.String() + ":" + name}, nil
}

// calendarFromSpec returns the calendar of a spec "<period>:<zone>",
// loading the zone.
func calendarFromSpec(spec string) (*calendar, error) {
	p, zone, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, fmt.Errorf("%w: calendar %q (want <period>:<zone>)", ErrInvalidWindow, spec)
	}
	period, err := ParsePeriod(p)
	if err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w: calendar %q: %v", ErrInvalidWindow, spec, err)
	}
	return calendarOf(Window{Calendar: period, Location: loc})
}

// civil returns the local date of t in c's zone, at UTC midnight (a date
// with no zone).
func (c *calendar) civil(t time.Time) time.Time {
	y, m, d := t.In(c.loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// periodOf returns the first date of the period holding date d (a civil
// date, see civil) and its ordinal.
func (c *calendar) periodOf(d time.Time) (time.Time, int64) {
	days := d.Unix() / 86400
	switch c.period {
	case Week:
		// 1970-01-05 (day 4) was a Monday.
		k := floorDiv(days-4, 7)
		return time.Unix((4+7*k)*86400, 0).UTC(), k
	case Month:
		y, m, _ := d.Date()
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC), int64(y-1970)*12 + int64(m) - 1
	}
	return d, days
}

// next returns the first date of the period after the one starting at d.
func (c *calendar) next(d time.Time) time.Time {
	switch c.period {
	case Week:
		return d.AddDate(0, 0, 7)
	case Month:
		return d.AddDate(0, 1, 0)
	}
	return d.AddDate(0, 0, 1)
}

// midnight returns the instant date d (civil) starts in c's zone: the
// last instant at which the local date turns from an earlier one to d, so
// that every instant from it to the next period's start has d's date or a
// later one in that period. Where the clocks are set back from 24:00 to
// 23:00, that is the second 00:00; where they are set back from 01:00 to
// 00:00, the first; where they skip 00:00 (set forward over midnight), the
// change itself.
func (c *calendar) midnight(d time.Time) time.Time {
	du := d.Unix()
	var best time.Time
	var offs []int
	for _, probe := range []int64{du - 2*86400, du - 86400, du, du + 86400, du + 2*86400} {
		_, off := time.Unix(probe, 0).In(c.loc).Zone()
		if slices.Contains(offs, off) {
			continue
		}
		offs = append(offs, off)
		cand := time.Unix(du-int64(off), 0)
		if h, m, sec := cand.In(c.loc).Clock(); h == 0 && m == 0 && sec == 0 && c.civil(cand).Equal(d) &&
			c.civil(cand.Add(-time.Nanosecond)).Before(d) && cand.After(best) {
			best = cand
		}
	}
	if !best.IsZero() {
		return best
	}
	// No instant reads d's 00:00: the clocks skip it, and d starts at
	// the change, the first instant whose date is d.
	lo, hi := du-2*86400, du+2*86400 // lo's date is before d, hi's not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if c.civil(time.Unix(mid, 0)).Before(d) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0)
}

// start returns the start of the period holding t, and its ordinal.
func (c *calendar) start(t time.Time) (time.Time, int64) {
	d, i := c.periodOf(c.civil(t))
	return c.midnight(d), i
}

// end returns the end of the period holding t.
func (c *calendar) end(t time.Time) time.Time {
	d, _ := c.periodOf(c.civil(t))
	return c.midnight(c.next(d))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// calTable is a calendar's table, good while the caller's now lies in
// [from, to): the period it was computed in.
type calTable struct {
	from, to time.Time
	text     string
}

var calCache struct {
	sync.Mutex
	s map[string]calTable
}

// table returns c's table around now (see the file's comment), from a
// cache while now stays in the same period.
func (c *calendar) table(now time.Time) string {
	calCache.Lock()
	t, ok := calCache.s[c.spec]
	calCache.Unlock()
	if ok && !now.Before(t.from) && now.Before(t.to) {
		return t.text
	}
	d, i := c.periodOf(c.civil(now))
	for range calBefore {
		d0, _ := c.periodOf(c.civil(c.midnight(d).Add(-time.Nanosecond)))
		d, i = d0, i-1
	}
	var b strings.Builder
	b.WriteString(c.spec)
	b.WriteByte('=')
	b.WriteString(strconv.FormatInt(i, 10))
	b.WriteByte(':')
	at := c.midnight(d)
	b.WriteString(strconv.FormatInt(at.UnixMicro(), 10))
	b.WriteByte(':')
	var run, count int64
	flush := func() {
		if count > 0 {
			if b.Len() > 0 && b.String()[b.Len()-1] != ':' {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(run, 10))
			b.WriteByte('*')
			b.WriteString(strconv.FormatInt(count, 10))
		}
	}
	for range calBefore + 1 + c.period.ahead() {
		d = c.next(d)
		e := c.midnight(d)
		l := e.Sub(at).Microseconds()
		if l != run {
			flush()
			run, count = l, 0
		}
		count++
		at = e
	}
	flush()
	from, _ := c.start(now)
	t = calTable{from: from, to: c.end(now), text: b.String()}
	calCache.Lock()
	if calCache.s == nil || len(calCache.s) > 256 {
		calCache.s = make(map[string]calTable)
	}
	calCache.s[c.spec] = t
	calCache.Unlock()
	return t.text
}

// calendarArg returns core.lua's ARGV[3] "c" prefix for the calendars of
// s and more at now ("" when there are none), each once.
func calendarArg(now time.Time, s *spec, more []*calendar) string {
	if len(s.cals) == 0 && len(more) == 0 {
		return ""
	}
	var b strings.Builder
	seen := make(map[string]bool, len(s.cals)+len(more))
	for _, c := range append(s.cals[:len(s.cals):len(s.cals)], more...) {
		if seen[c.spec] {
			continue
		}
		seen[c.spec] = true
		if b.Len() == 0 {
			b.WriteByte('c')
		} else {
			b.WriteByte(';')
		}
		b.WriteString(c.table(now))
	}
	b.WriteByte(' ')
	return b.String()
}

// askedCalendar reports whether err is a script's PACER_CALENDAR reply: a
// stored limit's calendar window the call carried no table for, which
// changed nothing and which mapError has learned. A call that is not
// retried otherwise (a peek, a pause) is sent again, once, with the table.
func askedCalendar(err error) bool {
	code, _ := layout.ErrorCode(err)
	return code == "PACER_CALENDAR"
}

// learnCalendar notes the calendar a script asked for on key (err: its
// PACER_CALENDAR reply, "PACER_CALENDAR <spec> ...", a stored limit's
// band): every later call on key sends its table. It reports whether the
// calendar is new to key (a call may then be sent again with its table).
func (l *Limiter) learnCalendar(key string, err error) bool {
	f := strings.Fields(err.Error())
	i := slices.Index(f, "PACER_CALENDAR")
	if i < 0 || i+1 >= len(f) {
		return false
	}
	c, cerr := calendarFromSpec(f[i+1])
	if cerr != nil {
		return false
	}
	for {
		old, ok := l.cals.Load(key)
		if !ok {
			if l.ncals.Load() >= maxKeys {
				return false
			}
			if _, loaded := l.cals.LoadOrStore(key, &[]*calendar{c}); !loaded {
				l.ncals.Add(1)
				return true
			}
			continue
		}
		list := *old.(*[]*calendar)
		if len(list) >= 16 || slices.ContainsFunc(list, func(x *calendar) bool { return x.spec == c.spec }) {
			return false
		}
		grown := append(slices.Clip(list), c)
		if l.cals.CompareAndSwap(key, old, &grown) {
			return true
		}
	}
}

// learnedCalendars returns the calendars learned on key.
func (l *Limiter) learnedCalendars(key string) []*calendar {
	if l.ncals.Load() == 0 {
		return nil
	}
	v, _ := l.cals.Load(key)
	if p, ok := v.(*[]*calendar); ok {
		return *p
	}
	return nil
}

// Span returns the start and end of w's window numbered i: the number a
// key's state gives its window band's latest window (cmd/pacer status
// reads it). For fixed windows, i counts Length from Origin (the epoch
// when zero); for calendar windows, i is the period's ordinal: a day's
// local date counted from 1970-01-01, an ISO week counted from Monday
// 1970-01-05, a month (year - 1970) * 12 + month - 1. w must be valid;
// zero times otherwise.
func (w Window) Span(i int64) (start, end time.Time) {
	if w.Calendar == 0 {
		if w.Length <= 0 {
			return time.Time{}, time.Time{}
		}
		o := w.Origin
		if o.IsZero() {
			o = time.Unix(0, 0)
		}
		l := w.Length.Truncate(time.Microsecond)
		start = o.Truncate(time.Microsecond).Add(time.Duration(i) * l)
		return start, start.Add(l)
	}
	c, err := calendarOf(w)
	if err != nil {
		return time.Time{}, time.Time{}
	}
	var d time.Time
	switch c.period {
	case Day:
		d = time.Unix(i*86400, 0).UTC()
	case Week:
		d = time.Unix((4+7*i)*86400, 0).UTC()
	default:
		d = time.Date(1970+int(floorDiv(i, 12)), time.Month(i-12*floorDiv(i, 12)+1), 1, 0, 0, 0, 0, time.UTC)
	}
	return c.midnight(d), c.midnight(c.next(d))
}
