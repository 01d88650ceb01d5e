package profile

// GitHubScaled is GitHub with its hour and minute shortened, for a test
// that runs the quotas through in seconds.
var GitHubScaled = github
