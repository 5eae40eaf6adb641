//! A set of access policies: Cedar text, parsed and validated against Trainyard's schema before
//! it is accepted, with errors that name the line.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use cedar_policy::{
    ActionConstraint, EntityUid, Policy, PolicySet, ResourceConstraint, Schema, ValidationMode,
    Validator,
};

use crate::request::ACTIONS;
use crate::{AccessRequest, Decision, Principal};
use miette::Diagnostic;

/// Trainyard's schema, in Cedar's schema language (`schema.cedarschema` beside this file).
pub const SCHEMA_TEXT: &str = include_str!("schema.cedarschema");

/// The most a policy set may hold, in bytes: far more than a platform team's rules (the shipped
/// examples are under 3 KiB), small enough that every request's evaluation stays cheap.
pub const MAX_POLICY_BYTES: usize = 64 * 1024;

/// The schema, parsed once. It is part of this crate, and a test parses it.
pub(crate) static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // A test parses it: a broken schema never ships.
    let (schema, _warnings) =
        Schema::from_cedarschema_str(SCHEMA_TEXT).expect("Trainyard's own Cedar schema parses");
    schema
});

/// One problem with a policy set, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// 1-based line of the text, when the error points at one.
    pub line: Option<usize>,
    /// 1-based column, with `line`.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "line {line}, column {column}: ")?,
            (Some(line), None) => write!(f, "line {line}: ")?,
            _ => {}
        }
        f.write_str(&self.message)
    }
}

/// Why a policy set was refused: every problem found, in the order of the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct PolicyErrors(pub Vec<PolicyError>);

/// The most policy sets a [`Slices`] keeps built for combinations of named resources; past it,
/// they are built again as requests need them.
const MAX_COMBINED: usize = 1024;

/// The most decisions a [`Policies`] remembers; past it, it starts again.
const MAX_DECISIONS: usize = 4096;

/// A question the policies answered: who asked what.
pub(crate) type Question = (Principal, AccessRequest);

/// A policy set that parsed and passed validation against the schema.
#[derive(Debug, Clone)]
pub struct Policies {
    pub(crate) set: PolicySet,
    /// Decisions already made, by question: a decision depends on nothing but the policies and
    /// the question (the principal, the action, the resource with its attributes, the context),
    /// so a repeated question (a team's sweep submitting the same way) is answered from here.
    decisions: Arc<Mutex<HashMap<Question, Decision>>>,
    /// For each action, the policies whose action scope can match it (directly or through a
    /// group), sliced by resource scope: Cedar evaluates every policy it is given, so each
    /// request gets only those that can apply to its action and resource.
    by_action: HashMap<&'static str, Slices>,
    text: String,
}

/// One action's policies by resource scope.
#[derive(Debug, Clone, Default)]
struct Slices {
    /// Policies whose resource scope names no entity (`resource`, `resource is T`): they may
    /// apply to any request.
    general: Arc<PolicySet>,
    /// Policies whose resource scope names an entity (`resource == E`, `resource in E`,
    /// `resource is T in E`), by that entity: they can apply only to a request whose resource
    /// is E or lies in E.
    by_entity: HashMap<EntityUid, Vec<Policy>>,
    /// The sets handed to Cedar for the combinations of named entities requests have met
    /// (`general` plus their policies), built once each.
    combined: Arc<Mutex<HashMap<Vec<EntityUid>, Arc<PolicySet>>>>,
}

impl Slices {
    /// The policies that can apply to a request whose resource and its ancestors are `chain`.
    fn for_resource(&self, chain: &[EntityUid]) -> Arc<PolicySet> {
        let named: Vec<EntityUid> = chain
            .iter()
            .filter(|uid| self.by_entity.contains_key(uid))
            .cloned()
            .collect();
        if named.is_empty() {
            return self.general.clone();
        }
        let mut combined = self.combined.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(set) = combined.get(&named) {
            return set.clone();
        }
        let mut set = PolicySet::clone(&self.general);
        for policy in named.iter().flat_map(|uid| &self.by_entity[uid]) {
            // A policy is named by one entity only, so it is never added twice.
            let _ = set.add(policy.clone());
        }
        let set = Arc::new(set);
        if combined.len() >= MAX_COMBINED {
            combined.clear();
        }
        combined.insert(named, set.clone());
        set
    }
}

impl Policies {
    /// Parses `text` and validates it against the schema (strictly: a policy that could never
    /// apply, or compares values of different types, is an error).
    pub fn parse(text: &str) -> Result<Self, PolicyErrors> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyErrors(vec![PolicyError {
                line: None,
                column: None,
                message: format!(
                    "the policies are {} bytes, more than the limit of {MAX_POLICY_BYTES}",
                    text.len()
                ),
            }]));
        }
        let set: PolicySet = text.parse().map_err(|errors: cedar_policy::ParseErrors| {
            PolicyErrors(
                errors
                    .iter()
                    .map(|e| located(text, e, e.to_string()))
                    .collect(),
            )
        })?;
        if set.templates().next().is_some() {
            return Err(PolicyErrors(vec![PolicyError {
                line: None,
                column: None,
                message: "templates (policies with ?principal or ?resource) are not supported"
                    .into(),
            }]));
        }
        if set.policies().next().is_none() {
            return Err(PolicyErrors(vec![PolicyError {
                line: None,
                column: None,
                message: "there is no policy in the text; to go back to letting every caller do \
                          everything, delete the policies instead"
                    .into(),
            }]));
        }
        let validation = Validator::new(SCHEMA.clone()).validate(&set, ValidationMode::Strict);
        let mut errors: Vec<PolicyError> = validation
            .validation_errors()
            .map(|e| {
                located(
                    text,
                    e,
                    format!("{} ({})", e, policy_name(&set, e.policy_id())),
                )
            })
            .collect();
        if !errors.is_empty() {
            errors.sort_by_key(|e| (e.line, e.column));
            return Err(PolicyErrors(errors));
        }
        let by_action = by_action(&set).map_err(|message| {
            PolicyErrors(vec![PolicyError {
                line: None,
                column: None,
                message,
            }])
        })?;
        Ok(Self {
            set,
            decisions: Arc::default(),
            by_action,
            text: text.to_owned(),
        })
    }

    /// The policies that can apply to `action` on a resource whose entity and ancestors are
    /// `chain` (the resource first).
    pub(crate) fn for_request(&self, action: &str, chain: &[EntityUid]) -> Arc<PolicySet> {
        match self.by_action.get(action) {
            Some(slices) => slices.for_resource(chain),
            None => Arc::new(self.set.clone()),
        }
    }

    /// The decision made before for `question`, if any.
    pub(crate) fn decided(&self, question: &Question) -> Option<Decision> {
        self.lock_decisions().get(question).cloned()
    }

    /// Remembers `decision` for `question`.
    pub(crate) fn remember(&self, question: Question, decision: Decision) {
        let mut decisions = self.lock_decisions();
        if decisions.len() >= MAX_DECISIONS {
            decisions.clear();
        }
        decisions.insert(question, decision);
    }

    fn lock_decisions(&self) -> std::sync::MutexGuard<'_, HashMap<Question, Decision>> {
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The text as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many policies the set holds.
    pub fn len(&self) -> usize {
        self.set.policies().count()
    }

    /// Whether the set holds no policy (never true of a parsed set).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each action's share of `set`, by the policies' action scopes (`action`, `action == A`,
/// `action in [A, Group]`) and the schema's groups, sliced by resource scope.
fn by_action(set: &PolicySet) -> Result<HashMap<&'static str, Slices>, String> {
    let actions = SCHEMA.action_entities().map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for name in ACTIONS {
        let action = crate::uid("Action", name)?;
        let groups: Vec<EntityUid> = actions
            .ancestors(&action)
            .map(|a| a.cloned().collect())
            .unwrap_or_default();
        let mut general = PolicySet::new();
        let mut by_entity: HashMap<EntityUid, Vec<Policy>> = HashMap::new();
        for policy in set.policies() {
            let applies = match policy.action_constraint() {
                ActionConstraint::Any => true,
                ActionConstraint::Eq(a) => a == action,
                ActionConstraint::In(list) => {
                    list.iter().any(|a| *a == action || groups.contains(a))
                }
            };
            if !applies {
                continue;
            }
            match policy.resource_constraint() {
                ResourceConstraint::Any | ResourceConstraint::Is(_) => {
                    general.add(policy.clone()).map_err(|e| e.to_string())?;
                }
                ResourceConstraint::Eq(uid)
                | ResourceConstraint::In(uid)
                | ResourceConstraint::IsIn(_, uid) => {
                    by_entity.entry(uid).or_default().push(policy.clone());
                }
            }
        }
        let slices = Slices {
            general: Arc::new(general),
            by_entity,
            combined: Arc::default(),
        };
        out.insert(name, slices);
    }
    Ok(out)
}

/// A policy's name for people: its `@id("…")` annotation, or Cedar's own id (`policy0` is the
/// first in the text).
pub(crate) fn policy_name(set: &PolicySet, id: &cedar_policy::PolicyId) -> String {
    set.annotation(id, "id")
        .map_or_else(|| id.to_string(), str::to_owned)
}

/// An error placed at the start of its first labelled span, as a line and column of `text`.
fn located(text: &str, diagnostic: &dyn Diagnostic, message: String) -> PolicyError {
    let offset = diagnostic
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset());
    let (line, column) = match offset {
        Some(offset) => {
            let (line, column) = line_and_column(text, offset);
            (Some(line), Some(column))
        }
        None => (None, None),
    };
    let help = diagnostic
        .help()
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    PolicyError {
        line,
        column,
        message: format!("{message}{help}"),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_parses() {
        LazyLock::force(&SCHEMA);
    }

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "ab\ncde\nf";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 4), (2, 2));
        assert_eq!(line_and_column(text, 7), (3, 1));
        assert_eq!(line_and_column(text, 99), (3, 2));
    }

    #[test]
    fn bad_policies_are_refused_with_the_line_at_fault() {
        let cases = [
            // A syntax error on line 3.
            (
                "permit(principal, action, resource);\n\n permit(principal action, resource);",
                3,
                "",
            ),
            // An attribute the schema does not have.
            (
                "permit(principal, action, resource);\npermit(principal, action == Trainyard::Action::\"SubmitServiceJob\", resource)\n  when { context.share == \"vision\" };",
                3,
                "share",
            ),
            // An action that does not exist.
            (
                "permit(principal, action == Trainyard::Action::\"SubmitJob\", resource);",
                1,
                "SubmitJob",
            ),
            // A type error: a priority compared with a string.
            (
                "\n\npermit(principal, action == Trainyard::Action::\"UpdateServiceJob\", resource)\n  when { context.schedulingPriority == \"high\" };",
                4,
                "",
            ),
        ];
        for (text, line, needle) in cases {
            let errors = Policies::parse(text).unwrap_err();
            let first = &errors.0[0];
            assert_eq!(first.line, Some(line), "{text}: {errors}");
            assert!(errors.to_string().contains(needle), "{text}: {errors}");
            assert!(
                errors.to_string().starts_with(&format!("line {line}")),
                "{errors}"
            );
        }
    }

    #[test]
    fn empty_oversized_and_template_policy_sets_are_refused() {
        for text in ["", "// nothing but a comment\n"] {
            let errors = Policies::parse(text).unwrap_err();
            assert!(errors.to_string().contains("no policy"), "{errors}");
        }
        let huge = format!(
            "// {}\npermit(principal, action, resource);",
            "x".repeat(70_000)
        );
        assert!(
            Policies::parse(&huge)
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
        let template = "permit(principal == ?principal, action, resource);";
        assert!(
            Policies::parse(template)
                .unwrap_err()
                .to_string()
                .contains("templates")
        );
    }

    #[test]
    fn a_valid_set_keeps_its_text_and_counts_its_policies() {
        let text = "@id(\"all\")\npermit(principal, action, resource);\nforbid(principal, action == Trainyard::Action::\"DeleteJobQueue\", resource);";
        let policies = Policies::parse(text).unwrap();
        assert_eq!(policies.text(), text);
        assert_eq!(policies.len(), 2);
    }
}
