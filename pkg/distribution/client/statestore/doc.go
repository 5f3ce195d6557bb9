// Package statestore keeps the agent's last received policy state on disk,
// so that an agent starting while the controller is unreachable enforces
// what it last knew instead of nothing. Its one user is the distribution
// client, which saves what it receives and restores it at start.
//
// The file is JSON with a format version. Writes are atomic: the new
// content goes to a temporary file in the same directory, is synced, and
// renamed over the old file (then the directory is synced), so a crash
// leaves either the old or the new state, never a torn one. A file of an
// unknown format version or that fails to parse is reported as an error;
// the agent then starts with no state (the pipeline passes no pod traffic
// before its first full sync — fail closed).
package statestore
