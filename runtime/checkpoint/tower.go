package checkpoint

import "fmt"

// TowerLayer is the layer number under which a checkpoint holds a tower's
// parameters and optimizer state: a trainable preprocess (a vision tower,
// an embedding kept out of the stages: runtime/train's Config.Tower) of
// which every rank holds an identical replica, so that it belongs to no
// stage and to no rank. A layout with Tower set saves it once, in world
// rank 0's shard, and every rank of any layout reads it from there. No
// stage holds layer TowerLayer: Layout.Check keeps the stages' layers
// below MaxLayer.
const TowerLayer = MaxLayer

// towerRank is the world rank whose shard holds the tower.
const towerRank = 0

// checkTower checks the tower's ownership under l: world rank 0's shard
// holds layer TowerLayer exactly when l.Tower, and no other shard holds it.
func checkTower(l Layout, rank int, holdsTower bool) error {
	switch {
	case holdsTower && !l.Tower:
		return fmt.Errorf("holds the tower's parameters (layer %d) but the layout has no tower (Layout.Tower)", TowerLayer)
	case holdsTower && rank != towerRank:
		return fmt.Errorf("holds the tower's parameters (layer %d), which only world rank %d's shard holds", TowerLayer, towerRank)
	case l.Tower && rank == towerRank && !holdsTower:
		return fmt.Errorf("the layout has a tower (Layout.Tower) and world rank %d's shard does not hold its parameters (layer %d)", towerRank, TowerLayer)
	}
	return nil
}
