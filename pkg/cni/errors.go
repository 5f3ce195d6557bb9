package cni

// Plugin-specific CNI error codes (the CNI spec leaves 100 and above to
// plugins).
const (
	// ErrIPAM means the IPAM delegate failed, e.g. its range is exhausted;
	// the delegate's message is in the error's details.
	ErrIPAM uint = 100
	// ErrOVS means an OVSDB operation failed.
	ErrOVS uint = 101
	// ErrNotAdmitted means the agent did not admit the pod within the
	// configuration's admissionTimeout (the details say why, as the agent
	// wrote it); everything ADD did is undone, so the runtime retries.
	ErrNotAdmitted uint = 102
)
