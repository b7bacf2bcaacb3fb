//! [`Expr`]: the placeholders of one request's expressions. Every attribute name goes through
//! `#` placeholders (so that no name ever clashes with one of DynamoDB's reserved words) and every
//! value through `:` placeholders; the request then carries both maps. [`Update`] also has the
//! two terms about a holder's seat that several writes share.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{self, Seat};

/// Names and values of one request's expressions.
#[derive(Debug, Default)]
pub struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    /// `#aN` for attribute `attr` (the same placeholder each time).
    pub fn name(&mut self, attr: &str) -> String {
        if let Some((placeholder, _)) = self.names.iter().find(|(_, a)| a.as_str() == attr) {
            return placeholder.clone();
        }
        let placeholder = format!("#a{}", self.names.len());
        self.names.insert(placeholder.clone(), attr.to_owned());
        placeholder
    }

    /// `#aN.#aM`: field `field` of map attribute `attr`.
    pub fn path(&mut self, attr: &str, field: &str) -> String {
        format!("{}.{}", self.name(attr), self.name(field))
    }

    /// `:vN` for `value`.
    pub fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// `:vN` for a number.
    pub fn num(&mut self, value: impl std::fmt::Display) -> String {
        self.value(item::n(value))
    }

    /// `:vN` for a string.
    pub fn text(&mut self, value: impl Into<String>) -> String {
        self.value(item::s(value))
    }

    /// The names map, `None` when empty (DynamoDB refuses an empty one).
    pub fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    /// The values map, `None` when empty.
    pub fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// An update expression under construction: its `SET` and `REMOVE` actions and its condition's
/// terms, joined with `AND`.
#[derive(Debug, Default)]
pub struct Update {
    pub expr: Expr,
    set: Vec<String>,
    remove: Vec<String>,
    conditions: Vec<String>,
}

impl Update {
    pub fn set(&mut self, action: String) {
        self.set.push(action);
    }

    pub fn remove(&mut self, path: String) {
        self.remove.push(path);
    }

    pub fn condition(&mut self, term: String) {
        self.conditions.push(term);
    }

    /// Requires that `seat` is held by `owner`.
    pub fn require_owner(&mut self, seat: &Seat, owner: &str) {
        let who = self.expr.path(&seat.attr(), item::OWNER);
        let me = self.expr.text(owner);
        self.condition(format!("{who} = {me}"));
    }

    /// Removes the holder in `seat` and its token (the token counter is never touched).
    pub fn remove_seat(&mut self, seat: &Seat) {
        let holder = self.expr.name(&seat.attr());
        let token = self.expr.name(&seat.token_attr());
        self.remove(holder);
        self.remove(token);
    }

    /// The update expression.
    pub fn update_expression(&self) -> String {
        let mut text = String::new();
        if !self.set.is_empty() {
            text.push_str("SET ");
            text.push_str(&self.set.join(", "));
        }
        if !self.remove.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str("REMOVE ");
            text.push_str(&self.remove.join(", "));
        }
        text
    }

    /// The condition expression, if any.
    pub fn condition_expression(&self) -> Option<String> {
        (!self.conditions.is_empty()).then(|| {
            self.conditions
                .iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" AND ")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_repeat_per_name_and_join_into_expressions() {
        let mut u = Update::default();
        let token = u.expr.name("token");
        assert_eq!(u.expr.name("token"), token);
        let one = u.expr.num(1);
        u.set(format!("{token} = {token} + {one}"));
        let h = u.expr.name("h_x0");
        u.remove(h.clone());
        u.condition(format!("attribute_exists({h})"));
        u.condition(format!("{token} > {one}"));
        assert_eq!(u.update_expression(), "SET #a0 = #a0 + :v0 REMOVE #a1");
        assert_eq!(
            u.condition_expression().unwrap(),
            "(attribute_exists(#a1)) AND (#a0 > :v0)"
        );
        assert_eq!(u.expr.names().unwrap().len(), 2);
    }

    #[test]
    fn seat_terms_name_the_holder_its_owner_and_its_token() {
        let seat = Seat::Slot(0);
        let mut u = Update::default();
        u.remove_seat(&seat);
        u.require_owner(&seat, "me");
        assert_eq!(u.update_expression(), "REMOVE #a0, #a1");
        assert_eq!(u.condition_expression().unwrap(), "(#a0.#a2 = :v0)");
        let names = u.expr.names().unwrap();
        assert_eq!(
            (
                names["#a0"].as_str(),
                names["#a1"].as_str(),
                names["#a2"].as_str()
            ),
            ("h_x0", "t_x0", item::OWNER)
        );
    }
}
