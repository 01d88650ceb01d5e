// Package granted reads the slot a reservation was granted on the server's
// clock, for the programs that judge pacer's grants (the combination
// runner, pacerbench): the clock a window band's windows and the fleet's
// lattice of local slots are on. Reservation exports only Time, the slot
// placed on the process's clock by its estimate of the server's, which is
// off by the estimate's error. It reads the unexported field: a judge's
// tool, never imported by the packages users build.
package granted

import (
	"reflect"

	"github.com/pacer-go/pacer/reserve"
)

// Slot is r's slot as granted, Unix ns on the server's clock, and true; a
// local reservation's is on the server's clock as its process estimates it.
// Where r has no such slot, it is r.Time() and r.Local(). Read it once r's
// Sleep (or Acquire) has returned: nothing changes r any more.
func Slot(r *reserve.Reservation) (ns int64, exact bool) {
	f := reflect.ValueOf(r).Elem().FieldByName("slotNS")
	if !f.IsValid() || f.Kind() != reflect.Int64 || f.Int() == 0 {
		return r.Time().UnixNano(), r.Local()
	}
	return f.Int(), true
}

// Booked is when Redis ran the script that granted r's slot (Unix ns on the
// server's clock; a leased slot's is when its lease ran; 0 for a slot
// granted otherwise: locally, or kept by a hold) and the share it was
// granted at (the scripts' ARGV[2] share; "" if not known, as for a lease
// or a hold): what a judge needs to tell the order in which slots were
// booked, and a reader of a run's dump the fleet view each was booked on.
func Booked(r *reserve.Reservation) (ranNS int64, share string) {
	v := reflect.ValueOf(r).Elem()
	if f := v.FieldByName("ranNS"); f.IsValid() && f.Kind() == reflect.Int64 {
		ranNS = f.Int()
	}
	if f := v.FieldByName("share"); f.IsValid() && f.Kind() == reflect.String {
		share = f.String()
	}
	return ranNS, share
}
