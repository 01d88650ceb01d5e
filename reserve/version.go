package reserve

// Version is the pacer release this code is, as its module's tag says.
// Between releases it names the last one; CHANGELOG.md's first section
// lists what changed since. docs/releasing.md says how it moves.
const Version = "v0.1.0"
