package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/layout"
)

// maxHolders is the most seat holders status and web list one by one.
const maxHolders = 20

// seatLines are status's lines of a key's in-flight band (nil: none):
// the seats in use, N, the calls waiting, then one line per holder.
func seatLines(s *admin.SeatStatus) []string {
	if s == nil {
		return nil
	}
	n := "N: the code's (an operator may set one: pacer set KEY --in-flight N)"
	if s.Stored > 0 {
		n = fmt.Sprintf("N %d stored by an operator (see history), in place of the code's", s.Stored)
	}
	lines := []string{fmt.Sprintf("%d %s in use, %d %s waiting; %s",
		s.Used, seatWord(s.Used), s.Waiting, callWord(s.Waiting), n)}
	for i, h := range s.Holders {
		if i == maxHolders {
			lines = append(lines, fmt.Sprintf("and %d more holders (pacer status --json lists them)", len(s.Holders)-maxHolders))
			break
		}
		lines = append(lines, fmt.Sprintf("%s: %d %s", holderText(h), h.Seats, seatWord(h.Seats)))
	}
	return lines
}

// writeSeats writes a key's in-flight lines (seatLines): "in flight",
// then "held by" and one line per holder; nothing without seats.
func writeSeats(line func(label, format string, args ...any), s *admin.SeatStatus) {
	for i, l := range seatLines(s) {
		label := ""
		switch i {
		case 0:
			label = "in flight"
		case 1:
			label = "held by"
		}
		line(label, "%s", l)
	}
}

// holderText names a holder: its rank in the fleet and its Limiter.
func holderText(h admin.SeatHolder) string {
	if id, ok := strings.CutPrefix(h.Holder, "i"); ok {
		return fmt.Sprintf("Limiter %s (no rank yet)", clean(id))
	}
	return fmt.Sprintf("rank %s, Limiter %s", clean(h.Holder), clean(h.Limiter))
}

// seatsShort is watch's IN FLIGHT column: "3/8 +2 waiting [0:2 1:1]",
// the N only when an operator stored one, the holders as rank:seats.
func seatsShort(s *admin.SeatStatus) string {
	if s == nil {
		return "-"
	}
	out := strconv.Itoa(s.Used)
	if s.Stored > 0 {
		out += "/" + strconv.Itoa(s.Stored)
	}
	if s.Waiting > 0 {
		out += fmt.Sprintf(" +%d waiting", s.Waiting)
	}
	var hs []string
	for i, h := range s.Holders {
		if i == 4 {
			hs = append(hs, "...")
			break
		}
		hs = append(hs, clean(h.Holder)+":"+strconv.Itoa(h.Seats))
	}
	if len(hs) > 0 {
		out += " [" + strings.Join(hs, " ") + "]"
	}
	return out
}

func seatWord(n int) string {
	if n == 1 {
		return "seat"
	}
	return "seats"
}

func callWord(n int) string {
	if n == 1 {
		return "call"
	}
	return "calls"
}

// parseInFlight reads --in-flight: a whole number from 1 to
// layout.MaxInFlight.
func parseInFlight(cmd, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > layout.MaxInFlight {
		return 0, usagef("%s: --in-flight %q: want a whole number of calls open at once, from 1 to %d", cmd, v, layout.MaxInFlight)
	}
	return n, nil
}
