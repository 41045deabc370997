package ovn

// Ownership of northbound rows. Every row the secondary network writes carries these keys in
// its external_ids, and Apply reads, changes and deletes only rows that carry them: it never
// touches what it did not make, and after a restart it finds everything it made by reading
// the NB database, which is the only record of who has which address.
//
// These markers belong with the data plane's others in internal/datapath/owner/ownership.go
// (every kernel and OVN marker in one file); they move there once that file is on main.
const (
	// KeyOwner marks a row as the secondary network's; its value is always OwnerSecondary.
	// One key with a fixed value, rather than the presence of any octopus.io key, so that a
	// future OVN writer of Octopus (the gateway's port) owns its rows under another value.
	KeyOwner = "octopus.io/owner"
	// OwnerSecondary is KeyOwner's value on the rows Apply manages.
	OwnerSecondary = "secondary-network"
	// KeyCluster is the cluster ID a switch or port belongs to: one NB database could serve
	// several clusters (tests do), and each Apply manages one cluster's rows only.
	KeyCluster = "octopus.io/cluster"

	// KeyCIDR, on the switch, is the block its ports' addresses come from, for people reading
	// the database (`ovn-nbctl list Logical_Switch`); Apply takes the block from its input and
	// replaces ports whose address is outside it.
	KeyCIDR = "octopus.io/cidr"
	// KeyLastAllocated, on the switch, is the address handed out last. Allocation continues
	// after it (internal/ipam/hostaddr), so a released address is reused last; kept in the
	// database, not in memory, so that this holds across restarts of the ovnmaster too.
	KeyLastAllocated = "octopus.io/last-allocated"

	// KeyPodNamespace, KeyPodName and KeyPodUID, on a port, name the pod it belongs to. The
	// UID tells a pod from a later one of the same name, which must not inherit the port
	// (nor, right away, the address) of the one before.
	KeyPodNamespace = "octopus.io/pod-namespace"
	KeyPodName      = "octopus.io/pod-name"
	KeyPodUID       = "octopus.io/pod-uid"

	// SwitchNamePrefix + the cluster ID is the name of a cluster's logical switch. Names in
	// the Logical_Switch table are not unique in OVN's schema; Apply finds its switch by
	// external_ids and uses the name only to refuse creating a second switch of that name.
	SwitchNamePrefix = "octopus-"
)
