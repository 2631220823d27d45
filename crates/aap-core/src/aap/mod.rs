//! The AAP contract shared by every binding and backend.

pub mod arguments;
pub mod catalog;
pub mod contract;
pub mod cursor;
pub mod error;
pub mod payload;
pub mod schemas;
pub mod skill;
