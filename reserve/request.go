package reserve

// A Request is what one use of a key costs: the key, the policy it is paced
// by, and the cost. Limiter's methods ending in N take one; Single builds
// the common case, n permits of one Limit. It is also the carrier the
// packages built on reserve pass around (hold, worker, scheduler).
//
// A Request that names a Tenant, a Lane other than Normal or a Weight is
// fair (see Fair, and "Fair share and lanes" in the package doc): the key's
// capacity is shared among the tenants waiting in a lane by their weights,
// and a higher lane goes first. A fair request waits for its turn; it is
// never refused for it.
type Request struct {
	Key    string
	Policy Policy
	Cost   Cost

	// Tenant is who the call is made for: the key's capacity is shared
	// among the tenants waiting, by Weight. Any string; "" is a tenant too
	// (the lane's default one).
	Tenant string

	// Lane is the call's priority: Urgent before Normal before Batch.
	// Default Normal.
	Lane Lane

	// Weight is the tenant's weight in its lane, > 0: a tenant of weight 2
	// gets twice the share of one of weight 1 while both wait. Default (0):
	// 1. Every request of a tenant should give the same weight.
	Weight float64
}

// Fair reports whether req is fair: it names a Tenant, a Lane other than
// Normal or a Weight. A fair request is booked only in its turn, never
// ahead of it, so it cannot be held (package hold refuses it).
func (req Request) Fair() bool {
	return req.Tenant != "" || req.Lane != Normal || req.Weight != 0
}

// Single returns the Request of n permits on key, paced at lim.
func Single(key string, lim Limit, n int) Request {
	return Request{Key: key, Policy: lim.Policy(), Cost: Permits(n)}
}

// single reports whether req is n permits of one Limit, as Single builds
// it: one bucket band named and charging PermitsUnit, and a whole number
// of permits as the only cost.
func (req Request) single() (Limit, int, bool) {
	if len(req.Policy) != 1 || len(req.Cost) != 1 {
		return Limit{}, 0, false
	}
	b := req.Policy[0]
	if b.Name != PermitsUnit || (b.Unit != "" && b.Unit != PermitsUnit) || b.Window != (Window{}) {
		return Limit{}, 0, false
	}
	n, ok := req.Cost[PermitsUnit]
	if !ok || n != float64(int(n)) {
		return Limit{}, 0, false
	}
	return b.Limit, int(n), true
}

// check compiles req.
func (req Request) check() (*spec, []float64, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, nil, err
	}
	s, err := req.Policy.compile()
	if err != nil {
		return nil, nil, err
	}
	amounts, err := s.costs(req.Cost)
	if err != nil {
		return nil, nil, err
	}
	return s, amounts, nil
}
