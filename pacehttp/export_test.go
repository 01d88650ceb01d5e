package pacehttp

// Waiting returns how many requests of t wait for their turn on key (an
// adaptive key's gate), for tests.
func Waiting(t *Transport, key string) int { return t.gates.ahead(gateKey{key: key}) }
