package hostguard

import (
	"fmt"
	"os"

	"github.com/google/nftables"
)

// Table is the netdev nftables table holding the guard chains.
const Table = "tierflow-cni"

// Chain names the guard chain of one host veth end.
func Chain(dev string) string { return "guard-" + dev }

func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table}
}

// conn opens an nftables connection to the network namespace at netnsPath,
// or to the current one when netnsPath is "".
func conn(netnsPath string) (*nftables.Conn, func(), error) {
	if netnsPath == "" {
		c, err := nftables.New()
		if err != nil {
			return nil, nil, fmt.Errorf("nftables: %w", err)
		}
		return c, func() {}, nil
	}
	f, err := os.Open(netnsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("nftables: open network namespace: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("nftables: %w", err)
	}
	return c, func() { f.Close() }, nil
}

// Install binds a drop-everything ingress chain to dev (in the network
// namespace at netnsPath, "" for the current one).
func Install(netnsPath, dev string) error {
	c, done, err := conn(netnsPath)
	if err != nil {
		return err
	}
	defer done()
	t := c.AddTable(table())
	drop := nftables.ChainPolicyDrop
	c.AddChain(&nftables.Chain{
		Name:     Chain(dev),
		Table:    t,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookIngress,
		Priority: nftables.ChainPriorityFilter,
		Device:   dev,
		Policy:   &drop,
	})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: add netdev chain %s/%s on %s: %w", Table, Chain(dev), dev, err)
	}
	return nil
}

// Present reports whether dev's guard chain exists.
func Present(netnsPath, dev string) (bool, error) {
	c, done, err := conn(netnsPath)
	if err != nil {
		return false, err
	}
	defer done()
	return present(c, dev)
}

func present(c *nftables.Conn, dev string) (bool, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return false, fmt.Errorf("nftables: list netdev chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == Table && ch.Name == Chain(dev) {
			return true, nil
		}
	}
	return false, nil
}

// Remove deletes dev's guard chain. A missing chain (never installed, or
// gone with its device on kernels that drop such chains) is not an error,
// nor is a kernel whose nftables cannot be listed: it cannot hold one.
func Remove(netnsPath, dev string) error {
	c, done, err := conn(netnsPath)
	if err != nil {
		return nil
	}
	defer done()
	if ok, err := present(c, dev); err != nil || !ok {
		return nil
	}
	c.DelChain(&nftables.Chain{Name: Chain(dev), Table: table()})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete netdev chain %s/%s: %w", Table, Chain(dev), err)
	}
	return nil
}

// RemoveTable deletes Table with every guard chain in it (tierflow's
// uninstall). It reports whether the table existed.
func RemoveTable(netnsPath string) (bool, error) {
	c, done, err := conn(netnsPath)
	if err != nil {
		return false, err
	}
	defer done()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return false, fmt.Errorf("nftables: list netdev tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == Table {
			c.DelTable(table())
			if err := c.Flush(); err != nil {
				return false, fmt.Errorf("nftables: delete netdev table %s: %w", Table, err)
			}
			return true, nil
		}
	}
	return false, nil
}
