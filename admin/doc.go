// Package admin is the operator's view of what a fleet of reserve.Limiters
// shares in Redis, and the controls to change it fleet-wide without a
// deploy: each key's limit in force, queue, pause, reservations granted
// and history (Client.Status, Keys, History), the fleet's Limiters
// (Client.Fleet), a limit stored for a key, whole or band by band,
// enforced or in shadow mode (Client.SetLimit, SetBands, UnsetLimit), and
// a pause or its end (Client.Pause, Resume), and when the provider sees
// such a change, behind the slots already granted (Client.Queue); an
// in-flight band's seats in use, calls waiting and holders
// (KeyStatus.Seats), and its N set live (Client.SetInFlight,
// UnsetInFlight). Every
// change is recorded with who made it and why, in the script call that
// makes it.
//
// cmd/pacer (docs/ops.md) is built on it; use it for a dashboard or a tool
// of your own. A Client is not a Limiter: it reserves nothing and does not
// count as one of the fleet. It must use the fleet's Options.KeyPrefix.
package admin
