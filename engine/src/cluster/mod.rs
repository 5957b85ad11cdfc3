//! Guest clusters to host clusters: the L1 table and the L2 table cache
//! (`l1l2`), the table cache both caches use (`cache`), where metadata
//! clusters lie (`meta_clusters`), and the lookups, loads, evictions and
//! L2 table allocation on top of them (`mapping`).

pub(crate) mod cache;
pub(crate) mod l1l2;
pub(crate) mod mapping;
pub(crate) mod meta_clusters;
