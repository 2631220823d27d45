//! The AAP contract shared by every binding and backend: skills, schemas, payloads, cursors,
//! errors, the catalog, the discovery documents, the contract every call passes and the backend port it calls.

pub mod adf;
pub mod arguments;
pub mod backend;
pub mod catalog;
pub mod compat;
pub mod contract;
#[cfg(test)]
mod corpus_edits;
pub mod cursor;
pub mod error;
pub mod payload;
pub mod prime;
pub mod schemas;
pub mod skill;
