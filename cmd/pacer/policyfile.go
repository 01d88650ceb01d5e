package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// A policy file (set --file) holds bands as status prints a limit
// (reserve.Policy.String), one a line or separated by ';', with '#'
// comments:
//
//	# api.openai.com, tier 3
//	requests: 500 per 1m0s
//	tokens: 500/s, burst 30000
//	daily: 10000 per 24h0m0s from 1970-01-01T08:00:00Z (requests)
//
// A bucket is "NAME: RATE/s, burst BURST", a window "NAME: N per
// DURATION", with "from TIME" (RFC 3339) for windows that do not start on
// the epoch's grid, a calendar window "NAME: N/day ZONE" (or week, month;
// ZONE a tz database name such as America/Los_Angeles, or UTC); "(UNIT)"
// ends a band whose unit is not its name. The
// text form the scripts store (reserve.Policy.MarshalText, "2 requests
// requests w 500 60000000:0 ...") is read too.

var (
	bucketBand = regexp.MustCompile(`^([^\s:;#]+):\s*(\S+)/s,\s*burst\s+(\S+?)(?:\s+\(([^\s()]+)\))?$`)
	// calendarBand is a calendar window as Policy.String writes it:
	// "daily: 1500/day America/Los_Angeles (requests)".
	calendarBand = regexp.MustCompile(`^([^\s:;#]+):\s*(\S+)/(day|week|month)\s+(\S+?)(?:\s+\(([^\s()]+)\))?$`)
	windowBand   = regexp.MustCompile(`^([^\s:;#]+):\s*(\S+)\s+per\s+(\S+?)(?:\s+from\s+(\S+?))?(?:\s+\(([^\s()]+)\))?$`)
	storedForm   = regexp.MustCompile(`^\d+(\s|$)`) // a band is "NAME: ...", never digits alone
)

// maxPolicyFile bounds what --file reads.
const maxPolicyFile = 1 << 20

// readPolicyFile reads and parses the policy file at path ("-": stdin).
func readPolicyFile(path string, stdin io.Reader) (reserve.Policy, error) {
	r := stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %v", path, pe.Err)
		} else if err != nil {
			return nil, err
		}
		defer f.Close()
		r, name = f, path
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPolicyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(b) > maxPolicyFile {
		return nil, fmt.Errorf("%s: over %d bytes", name, maxPolicyFile)
	}
	pol, err := parsePolicy(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return pol, nil
}

// parsePolicy parses a policy file's text, checked.
func parsePolicy(text string) (reserve.Policy, error) {
	type piece struct {
		line int
		text string
	}
	var pieces []piece
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for p := range strings.SplitSeq(line, ";") {
			if p = strings.TrimSpace(p); p != "" {
				pieces = append(pieces, piece{i + 1, p})
			}
		}
	}
	if len(pieces) == 0 {
		return nil, fmt.Errorf("no band (want lines such as \"tokens: 500/s, burst 30000\" or \"requests: 500 per 1m0s\")")
	}
	if len(pieces) == 1 && storedForm.MatchString(pieces[0].text) {
		var pol reserve.Policy
		if err := pol.UnmarshalText([]byte(pieces[0].text)); err != nil {
			return nil, fmt.Errorf("line %d: %v", pieces[0].line, err)
		}
		return pol, nil
	}
	pol := make(reserve.Policy, 0, len(pieces))
	for _, p := range pieces {
		b, err := parseBand(p.text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %q: %v", p.line, p.text, err)
		}
		pol = append(pol, b)
	}
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	return pol, nil
}

// parseBand parses one band as Policy.String writes it.
func parseBand(s string) (reserve.Band, error) {
	if m := bucketBand.FindStringSubmatch(s); m != nil {
		rate, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return reserve.Band{}, fmt.Errorf("rate %q: want a number", m[2])
		}
		burst, err := strconv.Atoi(m[3])
		if err != nil {
			return reserve.Band{}, fmt.Errorf("burst %q: want a whole number", m[3])
		}
		return reserve.Band{Name: m[1], Unit: m[4], Limit: reserve.Limit{Rate: rate, Burst: burst}}, nil
	}
	if m := calendarBand.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return reserve.Band{}, fmt.Errorf("N %q: want a number", m[2])
		}
		period, err := reserve.ParsePeriod(m[3])
		if err != nil {
			return reserve.Band{}, err
		}
		loc, err := time.LoadLocation(m[4])
		if err != nil || m[4] == "Local" {
			return reserve.Band{}, fmt.Errorf("zone %q: want a tz database name such as America/Los_Angeles or UTC", m[4])
		}
		return reserve.Band{Name: m[1], Unit: m[5], Window: reserve.Window{N: n, Calendar: period, Location: loc}}, nil
	}
	if m := windowBand.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return reserve.Band{}, fmt.Errorf("N %q: want a number", m[2])
		}
		length, err := time.ParseDuration(m[3])
		if err != nil {
			return reserve.Band{}, fmt.Errorf("window %q: want a duration such as 1m0s or 24h", m[3])
		}
		w := reserve.Window{N: n, Length: length}
		if m[4] != "" {
			if w.Origin, err = time.Parse(time.RFC3339Nano, m[4]); err != nil {
				return reserve.Band{}, fmt.Errorf("from %q: want a time such as 2026-01-01T08:00:00Z", m[4])
			}
		}
		return reserve.Band{Name: m[1], Unit: m[5], Window: w}, nil
	}
	return reserve.Band{}, fmt.Errorf("want \"NAME: RATE/s, burst BURST\", \"NAME: N per DURATION [from TIME]\" or \"NAME: N/day|week|month ZONE\", then \"(UNIT)\" if the unit is not NAME")
}
