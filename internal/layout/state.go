package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// State is a key's state string (lua/core.lua, KEYS[1]) read in Go, in
// either format: 2, written by this version's scripts ("t x s p" then
// records), or 1, written by older ones ("1 t x s p c" then records).
type State struct {
	T       int64   // Unix µs every time below counts from
	Seq     int64   // the last reservation's number
	PauseNS float64 // no slot before T + PauseNS (ns)
	Records []Record
}

// Record is one band's record: a bucket's z and e (ns after T), or a
// window's index and units.
type Record struct {
	Name   string
	Bucket bool
	X, Y   float64
}

// permits is the name of a single Limit's band (reserve.PermitsUnit),
// whose record format 2 writes without it.
const permits = "permits"

// ParseState reads a state string.
func ParseState(text string) (State, error) {
	bad := fmt.Errorf("unreadable state %q", text)
	f := strings.Fields(text)
	var st State
	var err1, err2, err3 error
	var recs []string
	v1 := len(f) > 0 && f[0] == "1"
	if v1 {
		if len(f) < 6 || (len(f)-6)%3 != 0 {
			return st, bad
		}
		st.T, err1 = strconv.ParseInt(f[1], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[3], 10, 64)
		st.PauseNS, err3 = strconv.ParseFloat(f[4], 64)
		recs = f[6:]
	} else {
		if len(f) < 4 || len(f[0]) < 2 {
			return st, bad
		}
		st.T, err1 = strconv.ParseInt(f[0], 10, 64)
		st.Seq, err2 = strconv.ParseInt(f[2], 10, 64)
		st.PauseNS, err3 = strconv.ParseFloat(strings.TrimPrefix(f[3], "c"), 64)
		recs = f[4:]
		if len(recs) == 2 {
			// A Limit's one bucket, written without its name.
			recs = []string{permits, recs[0], recs[1]}
		}
		if len(recs)%3 != 0 {
			return st, bad
		}
	}
	if err1 != nil || err2 != nil || err3 != nil {
		return st, bad
	}
	for i := 0; i < len(recs); i += 3 {
		if strings.HasPrefix(recs[i], "~") {
			continue // a pause's or a resume's record, not a band's (lua/core.lua)
		}
		r := Record{Name: recs[i], Bucket: true}
		x := recs[i+1]
		if v1 {
			// A bucket's z is written with a decimal point, a window's
			// index without.
			r.Bucket = strings.Contains(x, ".")
		} else if w, ok := strings.CutPrefix(x, "w"); ok {
			r.Bucket, x = false, w
		}
		var e1, e2 error
		r.X, e1 = strconv.ParseFloat(x, 64)
		r.Y, e2 = strconv.ParseFloat(recs[i+2], 64)
		if e1 != nil || e2 != nil {
			return st, bad
		}
		st.Records = append(st.Records, r)
	}
	return st, nil
}
