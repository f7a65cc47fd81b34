//! The unpacker's model of the staged tree: every path it created, as a
//! directory, a file or a symbolic link with its target.
//!
//! Staging is private to the transaction, so the model is the tree: entries
//! are checked against it instead of `lstat`-ing every parent. Once the
//! whole archive is read, [`Tree::check_links`] resolves every symbolic
//! link against the final tree the way the kernel would (following the
//! package's own links, `..` from where a link really leads, at most
//! [`MAX_LINK_HOPS`] links deep) and refuses any that leaves the package or
//! loops. Judging each link lexically on its own is not enough: a chain of
//! in-package links (`c0/.../c13 -> ../../..`, then
//! `x -> c0/.../c13/../../../../etc/secret`) resolves outside.

use std::collections::HashMap;

/// Links followed while resolving one target before it counts as a loop
/// (Linux's limit, `MAXSYMLINKS`).
pub const MAX_LINK_HOPS: u32 = 40;

/// Resolution steps (path components visited) over all links of one
/// archive. A real package has tens of links; a hostile one with many long
/// chained targets would otherwise cost hops x components x links.
const MAX_RESOLVE_STEPS: u64 = 1 << 24;

/// What the model knows about a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    File,
    Symlink(String),
}

/// Why a link was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LinkProblem {
    /// It resolves outside the boundary (or is absolute somewhere).
    Escapes,
    /// More than [`MAX_LINK_HOPS`] links deep: a loop or an absurd chain.
    Loop,
    /// The archive's links, together, take too long to resolve.
    TooComplex,
}

/// The staged tree, keyed by `/`-joined relative path.
#[derive(Default)]
pub struct Tree {
    nodes: HashMap<String, Node>,
    /// Bytes of paths and targets held, to bound memory.
    bytes: u64,
}

impl Tree {
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    pub fn insert(&mut self, path: String, node: Node) {
        self.bytes += path.len() as u64;
        if let Node::Symlink(t) = &node {
            self.bytes += t.len() as u64;
        }
        self.nodes.insert(path, node);
    }

    /// Bytes of names the model holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Resolve every symbolic link; the first that leaves the boundary or
    /// loops is returned with its problem. `boundary` is the number of
    /// leading components that must stay fixed (1: the package directory,
    /// 0: the destination).
    pub fn check_links(&self, boundary: usize) -> Result<(), (String, String, LinkProblem)> {
        let mut links: Vec<(&String, &String)> = self
            .nodes
            .iter()
            .filter_map(|(p, n)| match n {
                Node::Symlink(t) => Some((p, t)),
                _ => None,
            })
            .collect();
        // Deterministic: the same archive names the same link.
        links.sort();
        let mut budget = MAX_RESOLVE_STEPS;
        for (path, target) in links {
            let dir: Vec<&str> = path.split('/').collect();
            let dir = &dir[..dir.len() - 1];
            self.resolve(dir, target, boundary, &mut budget)
                .map_err(|p| (path.clone(), target.clone(), p))?;
        }
        Ok(())
    }

    /// Where `target`, read in directory `dir`, leads; an error when it
    /// leaves the first `boundary` components or loops.
    fn resolve(
        &self,
        dir: &[&str],
        target: &str,
        boundary: usize,
        budget: &mut u64,
    ) -> Result<(), LinkProblem> {
        if dir.len() < boundary {
            return Err(LinkProblem::Escapes);
        }
        let mut at: Vec<String> = dir.iter().map(|s| s.to_string()).collect();
        let mut path = at.join("/");
        // Components still to walk, last first.
        let mut todo: Vec<String> = Vec::new();
        push_components(&mut todo, target)?;
        let mut hops = 0u32;
        while let Some(c) = todo.pop() {
            *budget = budget.checked_sub(1).ok_or(LinkProblem::TooComplex)?;
            match c.as_str() {
                "" | "." => {}
                ".." => {
                    if at.len() <= boundary {
                        return Err(LinkProblem::Escapes);
                    }
                    let last = at.pop().unwrap_or_default();
                    path.truncate(path.len() - last.len());
                    if path.ends_with('/') {
                        path.pop();
                    }
                }
                name => {
                    if !path.is_empty() {
                        path.push('/');
                    }
                    path.push_str(name);
                    at.push(c);
                    if let Some(Node::Symlink(next)) = self.nodes.get(&path) {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err(LinkProblem::Loop);
                        }
                        // The link's target is read in the link's directory.
                        let last = at.pop().unwrap_or_default();
                        path.truncate(path.len() - last.len());
                        if path.ends_with('/') {
                            path.pop();
                        }
                        push_components(&mut todo, next)?;
                    }
                    // A directory: go on. A file or a missing name: the
                    // kernel would stop here; the rest is still judged
                    // (lexically from here on), so that nothing that would
                    // leave the package if the name appeared later passes.
                }
            }
        }
        Ok(())
    }
}

/// Queue a target's components (absolute targets escape by definition).
fn push_components(todo: &mut Vec<String>, target: &str) -> Result<(), LinkProblem> {
    if target.starts_with('/') {
        return Err(LinkProblem::Escapes);
    }
    todo.extend(target.split('/').rev().map(str::to_string));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, Node)]) -> Tree {
        let mut t = Tree::default();
        for (p, n) in entries {
            t.insert(p.to_string(), n.clone());
        }
        t
    }

    fn link(t: &str) -> Node {
        Node::Symlink(t.to_string())
    }

    #[test]
    fn links_inside_pass() {
        let t = tree(&[
            ("pkg", Node::Dir),
            ("pkg/lib", Node::Dir),
            ("pkg/lib/x", Node::File),
            ("pkg/node", link("lib")),
            ("pkg/lib/up", link("../node/x")),
            ("pkg/self", link(".")),
            ("pkg/lib/top", link("..")),
            ("pkg/dangling", link("nowhere/deeper")),
        ]);
        assert_eq!(t.check_links(1), Ok(()));
    }

    #[test]
    fn a_chain_that_leaves_is_refused() {
        // c0/c1/c2 -> ../.. is the package directory; from there, one
        // more `..` leaves it (lexically, x stays inside).
        let t = tree(&[
            ("pkg", Node::Dir),
            ("pkg/c0", Node::Dir),
            ("pkg/c0/c1", Node::Dir),
            ("pkg/c0/c1/c2", link("../..")),
            ("pkg/x", link("c0/c1/c2/../etc/secret")),
        ]);
        let (path, _, p) = t.check_links(1).unwrap_err();
        assert_eq!((path.as_str(), p), ("pkg/x", LinkProblem::Escapes));
        // The link in the middle, on its own, is fine.
        let t = tree(&[
            ("pkg", Node::Dir),
            ("pkg/c0", Node::Dir),
            ("pkg/c0/c1", Node::Dir),
            ("pkg/c0/c1/c2", link("../..")),
            ("pkg/x", link("c0/c1/c2/c0")),
        ]);
        assert_eq!(t.check_links(1), Ok(()));
    }

    #[test]
    fn loops_and_absolute_targets_are_refused() {
        let t = tree(&[
            ("pkg", Node::Dir),
            ("pkg/a", link("b")),
            ("pkg/b", link("a")),
        ]);
        assert_eq!(t.check_links(1).unwrap_err().2, LinkProblem::Loop);
        let t = tree(&[("pkg", Node::Dir), ("pkg/a", link("/etc"))]);
        assert_eq!(t.check_links(1).unwrap_err().2, LinkProblem::Escapes);
        let t = tree(&[("pkg", Node::Dir), ("pkg/a", link("b/../../x"))]);
        assert_eq!(t.check_links(1).unwrap_err().2, LinkProblem::Escapes);
    }

    #[test]
    fn the_destination_is_the_boundary_without_a_package() {
        let t = tree(&[("a", link("..")), ("b", Node::Dir)]);
        assert_eq!(t.check_links(0).unwrap_err().2, LinkProblem::Escapes);
        let t = tree(&[("b", Node::Dir), ("b/a", link(".."))]);
        assert_eq!(t.check_links(0), Ok(()));
    }
}
