package luastore

import (
	"strconv"

	"github.com/yuin/gopher-lua/ast"
)

// The compiler's part of Lua 5.1's number rules (luanum.go). Three things
// happen inside gopher-lua's virtual machine, out of reach of the
// environment, and differ from Redis's Lua:
//   - a % b on two numbers is fmod-based (Lua 5.1: a - floor(a/b)*b);
//   - a number operand of .. is written in Go's shortest form (Lua 5.1:
//     "%.14g");
//   - a string bound of a numeric for loop is refused (Lua 5.1 converts it);
//
// and two in its compiler: a numeric literal with a leading zero ("010")
// is read as octal; and an assignment of several targets writes a local
// target as soon as its value is computed, so that the expressions after
// it read the new value (yuin/gopher-lua#440: "x, y = y, x % y" does not
// compute a gcd), where Lua 5.1 evaluates every expression before it
// assigns any. So before compiling, the script's syntax tree is
// rewritten: a % b becomes a call of the environment's mod function, each
// operand of .. that is not a string literal a call of its concat function,
// each bound of a numeric for loop that is not a literal a call of its
// number function, each literal is written back as the number Lua 5.1
// reads, and each assignment of several targets becomes a block that
// evaluates everything first (multiAssign). The three functions come in as
// locals of the chunk, so a script's functions reach them as upvalues, by
// names no script can write.

const (
	modName = "\x00mod" // luanum.go's modFunc
	catName = "\x00cat" // luanum.go's concatFunc
	numName = "\x00num" // luanum.go's forNumFunc
	tmpName = "\x00tmp" // multiAssign's locals: tmpName + "1", "2", ...
)

// rewriteChunk rewrites a parsed script (see above) in place and returns
// it with the prologue that makes the functions locals.
func rewriteChunk(chunk []ast.Stmt) []ast.Stmt {
	stmts(chunk)
	prologue := &ast.LocalAssignStmt{
		Names: []string{modName, catName, numName},
		Exprs: []ast.Expr{&ast.IdentExpr{Value: modName}, &ast.IdentExpr{Value: catName}, &ast.IdentExpr{Value: numName}},
	}
	prologue.SetLine(1)
	prologue.SetLastLine(1)
	return append([]ast.Stmt{prologue}, chunk...)
}

func stmts(list []ast.Stmt) {
	for i, s := range list {
		list[i] = stmt(s)
	}
}

func exprs(list []ast.Expr) {
	for i, e := range list {
		list[i] = expr(e)
	}
}

func stmt(s ast.Stmt) ast.Stmt {
	switch s := s.(type) {
	case *ast.AssignStmt:
		exprs(s.Lhs)
		exprs(s.Rhs)
		if len(s.Lhs) > 1 {
			return multiAssign(s)
		}
	case *ast.LocalAssignStmt:
		exprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = expr(s.Expr)
	case *ast.DoBlockStmt:
		stmts(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Stmts)
	case *ast.RepeatStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Stmts)
	case *ast.IfStmt:
		s.Condition = expr(s.Condition)
		stmts(s.Then)
		stmts(s.Else)
	case *ast.NumberForStmt:
		s.Init = forBound(expr(s.Init))
		s.Limit = forBound(expr(s.Limit))
		if s.Step != nil {
			s.Step = forBound(expr(s.Step))
		}
		stmts(s.Stmts)
	case *ast.GenericForStmt:
		exprs(s.Exprs)
		stmts(s.Stmts)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			if s.Name.Func != nil {
				s.Name.Func = expr(s.Name.Func)
			}
			if s.Name.Receiver != nil {
				s.Name.Receiver = expr(s.Name.Receiver)
			}
		}
		stmts(s.Func.Stmts)
	case *ast.ReturnStmt:
		exprs(s.Exprs)
	}
	return s
}

// multiAssign rewrites an assignment of several targets,
//
//	t[k], x = e1, e2
//
// as Lua 5.1 runs it: the tables and keys of the indexed targets, then the
// expressions, in order, each once, then the assignments, the last target
// first (lparser.c's restassign):
//
//	do local t1, t2, t3, t4 = t, k, e1, e2; x = t4; t1[t2] = t3 end
//
// A local statement evaluates all its expressions into registers of its
// own before its names exist, and an assignment of one target from a
// local has nothing after it to read the target: gopher-lua compiles
// both as Lua 5.1 does.
func multiAssign(s *ast.AssignStmt) ast.Stmt {
	local := &ast.LocalAssignStmt{}
	temp := func(e ast.Expr) *ast.IdentExpr {
		name := tmpName + strconv.Itoa(len(local.Names)+1)
		local.Names = append(local.Names, name)
		if e != nil {
			local.Exprs = append(local.Exprs, e)
		}
		return ident(name, s)
	}
	for _, l := range s.Lhs {
		if a, ok := l.(*ast.AttrGetExpr); ok {
			a.Object, a.Key = temp(a.Object), temp(a.Key)
		}
	}
	values := make([]ast.Expr, len(s.Lhs))
	for i := range values {
		values[i] = temp(nil)
	}
	// Every expression, the surplus too (evaluated, then dropped); the
	// last one gives as many values as the targets left want.
	local.Exprs = append(local.Exprs, s.Rhs...)
	block := &ast.DoBlockStmt{Stmts: []ast.Stmt{local}}
	for i := len(s.Lhs) - 1; i >= 0; i-- {
		a := &ast.AssignStmt{Lhs: []ast.Expr{s.Lhs[i]}, Rhs: []ast.Expr{values[i]}}
		a.SetLine(s.Line())
		a.SetLastLine(s.LastLine())
		block.Stmts = append(block.Stmts, a)
	}
	for _, n := range []ast.PositionHolder{local, block} {
		n.SetLine(s.Line())
		n.SetLastLine(s.LastLine())
	}
	return block
}

// ident returns a reference to the local name, at at's lines.
func ident(name string, at ast.PositionHolder) *ast.IdentExpr {
	id := &ast.IdentExpr{Value: name}
	id.SetLine(at.Line())
	id.SetLastLine(at.LastLine())
	return id
}

func expr(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.NumberExpr:
		if v, ok := str2number(e.Value); ok {
			e.Value = strconv.FormatFloat(v, 'g', -1, 64)
		}
	case *ast.AttrGetExpr:
		e.Object = expr(e.Object)
		e.Key = expr(e.Key)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			if f.Key != nil {
				f.Key = expr(f.Key)
			}
			f.Value = expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if e.Func != nil {
			e.Func = expr(e.Func)
		}
		if e.Receiver != nil {
			e.Receiver = expr(e.Receiver)
		}
		exprs(e.Args)
	case *ast.LogicalOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
	case *ast.RelationalOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
	case *ast.StringConcatOpExpr:
		e.Lhs, e.Rhs = concatOperand(expr(e.Lhs)), concatOperand(expr(e.Rhs))
	case *ast.ArithmeticOpExpr:
		e.Lhs, e.Rhs = expr(e.Lhs), expr(e.Rhs)
		if e.Operator == "%" {
			return call(modName, e, e.Lhs, e.Rhs)
		}
	case *ast.UnaryMinusOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		e.Expr = expr(e.Expr)
	case *ast.FunctionExpr:
		stmts(e.Stmts)
	}
	return e
}

// concatOperand wraps an operand of .. in the concat function, unless it
// is a string literal or another concatenation (whose operands are).
func concatOperand(e ast.Expr) ast.Expr {
	switch e.(type) {
	case *ast.StringExpr, *ast.StringConcatOpExpr:
		return e
	}
	return call(catName, e, e)
}

// forBound wraps a numeric for loop's bound in the number function unless
// it is a literal.
func forBound(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.NumberExpr:
		return e
	case *ast.UnaryMinusOpExpr:
		if _, ok := e.Expr.(*ast.NumberExpr); ok {
			return e
		}
	}
	return call(numName, e, e)
}

// call returns a call of the function named name on args, one value (as
// the expression it replaces), at at's lines.
func call(name string, at ast.Expr, args ...ast.Expr) ast.Expr {
	f := &ast.IdentExpr{Value: name}
	f.SetLine(at.Line())
	f.SetLastLine(at.LastLine())
	c := &ast.FuncCallExpr{Func: f, Args: args, AdjustRet: true}
	c.SetLine(at.Line())
	c.SetLastLine(at.LastLine())
	return c
}
