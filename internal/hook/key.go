package hook

// CheckKey reports a key no caller may use (reserve's own check, the one
// every entry point of reserve and admin applies): reserve.ErrEmptyKey
// for "", reserve.ErrReservedKey for the fleet's name, "limiters", whose
// Redis keys hold the fleet's records. The packages built on reserve
// check their keys with it before they make a Redis key of one.
var CheckKey func(key string) error
