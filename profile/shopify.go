package profile

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// ShopifyLimits are an app's GraphQL Admin API limits on one store. The
// zero values are those of a store on the Standard plan.
type ShopifyLimits struct {
	// Shop is the store's domain, "example.myshopify.com". The key is
	// Shop + "/admin/api/graphql": each app and store pair has its own
	// bucket, so the fleet of one app shares one key per store.
	Shop string
	// Maximum is the bucket's size in points (throttleStatus's
	// maximumAvailable). Default 20 × RestoreRate (2,000 on Standard).
	Maximum int
	// RestoreRate is the points restored per second (throttleStatus's
	// restoreRate). Default 100 (Standard; Advanced 200, Plus 1,000).
	RestoreRate float64
}

// Shopify returns the profile of an app's GraphQL Admin API quota on one
// store.
//
// The rules it implements (shopify.dev, "Shopify API limits" and "GraphQL
// Admin API rate limits"): each app and store pair has a leaky bucket of
// cost points, restored continuously at the store's plan's rate (100
// points per second on Standard, 200 on Advanced, 1,000 on Plus, 2,000 for
// enterprise); a query's requested cost (the most its fields may cost)
// must be available when it arrives, the query then costs its actual cost
// (the difference is refunded), and a query whose requested cost is not
// available is refused with status 200 and an error THROTTLED, costing
// nothing. Every answer's extensions.cost reports requestedQueryCost,
// actualQueryCost and the bucket (throttleStatus: maximumAvailable,
// currentlyAvailable, restoreRate).
//
// It assumes the bucket holds 20 seconds of its restore rate, as the
// older documentation's figures did (1,000 points restored at 50 a second
// on Standard, 10,000 at 500 on Plus): the current table gives only the
// rates. Read maximumAvailable and restoreRate from any answer's
// throttleStatus and give them. It assumes nothing else calls the API for
// the same app on the same store outside the fleet.
//
// The policy is one bucket band, "points": Shopify's, RestoreRate points
// a second, holding Maximum less ShopifyLate of RestoreRate (Settings.Burst
// does not apply: Shopify enforces no shorter period). That margin is for
// a query that reaches Shopify late after its slot (a loaded machine, a
// slow network): Shopify's bucket, full meanwhile, did not take its
// points while pacer counted them restored, and the next query, on time,
// would find less than its requested cost (a fleet test on a loaded
// machine had 1 of 17 queries throttled with the whole Maximum). A Call's Input is the query's requested
// cost in points (known before the call: a previous answer's
// requestedQueryCost for the same query, or computed from the schema's
// costs); Output is not used. The answer's actualQueryCost settles it
// without the Profile's credit (reserve.Reservation.Settle gives the rest
// back where later reservations have not built on it): the credit would
// let a call be sent with less than its requested cost available, which
// Shopify throttles (docs/profiles.md, "Estimates and the credit").
// Under a queue the fleet is then paced at the requested costs, not the
// actual ones.
//
// Options set pacehttp's ShopifyThrottle (a THROTTLED answer pauses the
// key for (requested - available) / restoreRate and is retried) and
// RetryUnsafe: GraphQL calls are POSTs, and pacehttp retries only the
// refusals (THROTTLED, a 429, a 503 asking for a wait), which Shopify did
// not run. Shopify's answers carry no count of calls.
// ShopifyLate is how late after its slot a query may reach Shopify and
// still find its requested cost in Shopify's bucket: the Shopify profile's
// bucket holds that much of RestoreRate less than Maximum.
const ShopifyLate = 250 * time.Millisecond

func Shopify(l ShopifyLimits, s Settings) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.RestoreRate == 0 {
		l.RestoreRate = 100
	}
	if l.Maximum == 0 && l.RestoreRate >= 1 && l.RestoreRate <= 1e6 {
		l.Maximum = int(20 * l.RestoreRate)
	}
	if l.Shop == "" || strings.ContainsAny(l.Shop, "/ ") || math.IsNaN(l.RestoreRate) || math.IsInf(l.RestoreRate, 0) || l.RestoreRate <= 0 || l.Maximum < 1 {
		return nil, fmt.Errorf("%w: Shopify %+v: want a Shop domain (no slash), RestoreRate > 0 and Maximum >= 1", ErrInvalid, l)
	}
	burst := l.Maximum - int(math.Ceil(l.RestoreRate*ShopifyLate.Seconds()))
	if burst < 1 {
		return nil, fmt.Errorf("%w: Shopify %+v: Maximum must be above %v of RestoreRate (ShopifyLate, a late query's margin)", ErrInvalid, l, ShopifyLate)
	}
	return &Profile{
		Name: "shopify", Key: l.Shop + "/admin/api/graphql", Settings: s, shopify: true, exact: true,
		Policy: reserve.Policy{{Name: "points", Limit: reserve.Limit{Rate: l.RestoreRate, Burst: burst}}},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"points": math.Ceil(c.Input)}
		},
		usage:  func(body []byte, _ Call) (Usage, error) { return shopifyUsage(body) },
		actual: func(u Usage) reserve.Cost { return reserve.Cost{"points": u.Input} },
	}, nil
}

// shopifyUsage reads Shopify's extensions.cost.actualQueryCost, as Input.
func shopifyUsage(body []byte) (Usage, error) {
	a, errs := pacehttp.ParseBody(body, time.Now(), nil)
	if len(errs) > 0 {
		return Usage{}, errs[0]
	}
	if a.Cost == nil || !a.Cost.HasActual || a.Cost.Actual < 0 {
		return Usage{}, errors.New("the answer's body has no extensions.cost.actualQueryCost")
	}
	return Usage{Input: a.Cost.Actual}, nil
}
