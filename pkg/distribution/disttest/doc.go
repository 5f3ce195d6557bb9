// Package disttest holds helpers for tests of the distribution stream:
// TLS material for a loopback server, and a TCP proxy whose connections a
// test can cut to simulate a network failure.
package disttest
