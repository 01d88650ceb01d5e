package profile

// GitHubScaled is GitHub with its hour and minute shortened, for a test
// that runs the quotas through in seconds.
var GitHubScaled = github

// GeminiScaled is Gemini with its minute shortened, for a test that runs
// the minute's quotas through in seconds.
var GeminiScaled = gemini
