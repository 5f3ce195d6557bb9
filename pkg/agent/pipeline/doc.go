// Package pipeline declares the agent's OpenFlow pipeline once: its tables in
// order (each with the name tooling prints and what it does with a packet
// none of its flows match), the registers, conntrack mark and label bits and
// the cookie layout every flow uses, and the static flows that classify
// ports, guard against spoofing, run conntrack and forward packets, in
// uplink mode, routed (gateway) mode or encap mode (gateway and tunnel). The policy tables' rule flows are
// compiled by package policyflows; see DESIGN.md in this directory for the
// whole picture.
package pipeline
