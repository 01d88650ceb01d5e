package luastore

// The keyspace: what one key holds, and the rules every command follows to
// find a key (lazy expiry, the type check) and to drop it. All of it runs
// with the Store's mutex held.

// kind is the type of a key's value, as TYPE names it.
type kind uint8

const (
	kindString kind = iota + 1
	kindHash
	kindZSet
	kindList
)

func (k kind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindHash:
		return "hash"
	case kindZSet:
		return "zset"
	case kindList:
		return "list"
	}
	return "none"
}

// entry is one key's value and expiry. Exactly one of the value fields is
// in use, by kind.
type entry struct {
	kind   kind
	str    string
	hash   *hash
	zset   *zset
	list   []string // head first
	expire int64    // Unix ms after which the key is gone; 0: never
}

// Redis's error replies that commands share.
const (
	errWrongType = Error("WRONGTYPE Operation against a key holding the wrong kind of value")
	errSyntax    = Error("ERR syntax error")
	errNotInt    = Error("ERR value is not an integer or out of range")
	errNotFloat  = Error("ERR value is not a valid float")
)

// lookup returns key's entry, or nil when it is missing or expired (an
// expired key is deleted on the way, as Redis does on access).
func (s *Store) lookup(key string) *entry {
	e := s.keys[key]
	if e == nil {
		return nil
	}
	if e.expire != 0 && s.nowMs > e.expire {
		delete(s.keys, key)
		return nil
	}
	return e
}

// lookupKind returns key's entry if it holds k, nil if the key is missing,
// and errWrongType if it holds another type.
func (s *Store) lookupKind(key string, k kind) (*entry, error) {
	e := s.lookup(key)
	if e != nil && e.kind != k {
		return nil, errWrongType
	}
	return e, nil
}

// create stores a new, empty value of kind k under key (which is missing)
// and returns it.
func (s *Store) create(key string, k kind) *entry {
	e := &entry{kind: k}
	switch k {
	case kindHash:
		e.hash = newHash()
	case kindZSet:
		e.zset = newZSet()
	}
	s.keys[key] = e
	return e
}

// dropIfEmpty deletes key when its hash, sorted set or list is empty, as
// Redis never keeps an empty one.
func (s *Store) dropIfEmpty(key string, e *entry) {
	if (e.kind == kindHash && e.hash.len() == 0) || (e.kind == kindZSet && e.zset.len() == 0) || (e.kind == kindList && len(e.list) == 0) {
		delete(s.keys, key)
	}
}

// ttl returns key's PTTL: the milliseconds left, -1 without an expiry,
// -2 when the key is missing.
func (s *Store) ttl(key string) int64 {
	e := s.lookup(key)
	switch {
	case e == nil:
		return -2
	case e.expire == 0:
		return -1
	}
	return max(e.expire-s.nowMs, 0)
}
