package reserve

// A Request is what one use of a key costs: the key, the policy it is paced
// by, and the cost. It is the carrier the job queue integrations (packages
// worker and scheduler) and Holds pass around.
type Request struct {
	Key    string
	Policy Policy
	Cost   Cost
}

// Single returns the Request of n permits on key, paced at lim.
func Single(key string, lim Limit, n int) Request {
	return Request{Key: key, Policy: lim.Policy(), Cost: Permits(n)}
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
