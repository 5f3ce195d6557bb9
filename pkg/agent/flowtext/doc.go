// Package flowtext renders openflow.Flow values in ovs-ofctl syntax for the
// agent: as identity keys (table, priority and match decide which installed
// flow a desired flow replaces) and as the text of `ovs-ofctl --bundle`
// files. It covers exactly the fields and actions the agent's pipeline uses.
package flowtext
